// Signing up, logging in and out, and the account footer: tier and budget remaining.

import { api, apiGet } from "./api.js";
import { solveChallenge } from "./challenge.js";
import { applyTheme, byId, duration, h, number } from "./dom.js";

const REFRESH_SECONDS = 30;

const MODES = {
  login: {
    title: "Log in to parley",
    submit: "Log in",
    switchText: "No account yet?",
    switchButton: "Sign up",
    path: "/api/auth/login",
    autocomplete: "current-password",
  },
  signup: {
    title: "Create your parley account",
    submit: "Sign up",
    switchText: "Already have an account?",
    switchButton: "Log in",
    path: "/api/auth/signup",
    autocomplete: "new-password",
  },
  forgot: {
    title: "Reset your password",
    submit: "Mail me a link",
    switchText: "Remembered it?",
    switchButton: "Log in",
    path: "/api/auth/password-reset",
    autocomplete: "off",
    fields: ["email"],
  },
  reset: {
    title: "Choose a new password",
    submit: "Set it and sign in",
    switchText: "Not now?",
    switchButton: "Log in",
    path: "/api/auth/password-reset/confirm",
    autocomplete: "new-password",
    fields: ["password"],
    passwordLabel: "New password",
  },
};

export class AuthForm {
  /** onLoggedIn(): called after a successful login or sign-up. */
  constructor(onLoggedIn) {
    this.onLoggedIn = onLoggedIn;
    this.form = byId("auth-form");
    this.email = byId("auth-email");
    this.password = byId("auth-password");
    this.error = byId("auth-error");
    this.submitButton = byId("auth-submit");
    this.notice = byId("auth-notice");
    this.setMode("login");
    byId("auth-switch").addEventListener("click", () => {
      this.setMode(this.mode === "login" ? "signup" : "login");
    });
    byId("auth-forgot").addEventListener("click", () => this.forgot());
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
  }

  setMode(mode) {
    this.mode = mode;
    const m = MODES[mode];
    byId("auth-title").textContent = m.title;
    this.submitButton.textContent = m.submit;
    byId("auth-switch-text").textContent = m.switchText;
    byId("auth-switch").textContent = m.switchButton;
    this.password.autocomplete = m.autocomplete;
    const fields = m.fields || ["email", "password"];
    for (const name of ["email", "password"]) {
      const shown = fields.includes(name);
      this[name].hidden = !shown;
      this.form.querySelector(`label[for="auth-${name}"]`).hidden = !shown;
    }
    byId("auth-forgot").hidden = mode !== "login";
    this.form.querySelector('label[for="auth-password"]').textContent = m.passwordLabel || "Password";
    this.error.textContent = "";
  }

  /** "Forgot password?": the mail form where mail is set up, else whom to ask. */
  forgot() {
    if (this.resetByMail === false) {
      this.say("Ask your administrator for a password reset link.");
      return;
    }
    this.setMode("forgot");
    this.email.focus();
  }

  say(text) {
    this.notice.textContent = text;
    this.notice.hidden = !text;
  }

  show(notice) {
    const query = new URLSearchParams(window.location.search);
    const failed = query.get("sso_error");
    if (failed) window.history.replaceState(null, "", window.location.pathname);
    notice = notice || (failed ? `Could not sign you in: ${failed}` : "");
    this.notice.textContent = notice || "";
    this.notice.hidden = !notice;
    this.password.value = "";
    this.resetToken = null;
    if (window.location.hash.startsWith("#reset=")) { // a reset link: the token stays here
      this.resetToken = decodeURIComponent(window.location.hash.slice("#reset=".length));
      window.history.replaceState(null, "", window.location.pathname);
      this.setMode("reset");
      this.password.focus();
    } else {
      this.email.focus();
    }
    this.offerProviders();
  }

  /** The identity providers' buttons; the password form hidden where passwords are off. */
  async offerProviders() {
    let options;
    try {
      options = await apiGet("/api/auth/providers");
    } catch {
      return; // the password form stays
    }
    const box = byId("sso");
    box.replaceChildren(...options.providers.map((p) => h("a", {
      class: "button sso-button", href: `/api/auth/oidc/${encodeURIComponent(p.name)}/start`,
    }, `Sign in with ${p.label}`)));
    box.hidden = options.providers.length === 0;
    this.resetByMail = options.password_reset_by_mail;
    for (const el of [this.email, this.password, this.submitButton, byId("auth-switch").parentElement,
      ...this.form.querySelectorAll("label")]) {
      el.hidden = !options.local_passwords;
    }
  }

  async submit() {
    const email = this.email.value.trim();
    const password = this.password.value;
    if (this.mode === "forgot") return this.askForLink(email);
    if (this.mode === "reset") return this.setNewPassword(password);
    if (!email || !password) {
      this.error.textContent = "Enter your email and password.";
      return;
    }
    if (this.mode === "signup" && password.length < 8) {
      this.error.textContent = "Choose a password of at least 8 characters.";
      return;
    }
    this.error.textContent = "";
    this.submitButton.disabled = true;
    try {
      const answer = await this.send({ email, password });
      this.password.value = "";
      if (answer && answer.status === "confirm_email") { // no session until the link
        this.setMode("login");
        this.say(answer.message);
        return;
      }
      this.notice.hidden = true;
      await this.onLoggedIn();
    } catch (err) {
      this.error.textContent = authMessage(err);
      if (err.code === "email_unconfirmed") this.offerAnotherLink(email);
    } finally {
      this.submitButton.disabled = false;
    }
  }

  /** An account awaiting its confirmation: another link on request. */
  offerAnotherLink(email) {
    const again = h("button", { type: "button", class: "link" }, "Mail me another link");
    again.addEventListener("click", () => this.busy(async () => {
      const answer = await api("POST", "/api/auth/confirm/resend", { json: { email } });
      this.say(`${answer.message} Check your mail.`);
    }));
    this.error.append(" ", again);
  }

  async askForLink(email) {
    if (!email) {
      this.error.textContent = "Enter your account's email.";
      return;
    }
    await this.busy(async () => {
      const answer = await api("POST", MODES.forgot.path, { json: { email } });
      this.setMode("login");
      this.say(`${answer.message} Check your mail.`);
    });
  }

  async setNewPassword(password) {
    if (password.length < 8) {
      this.error.textContent = "Choose a password of at least 8 characters.";
      return;
    }
    await this.busy(async () => {
      await api("POST", MODES.reset.path, { json: { token: this.resetToken, password } });
      this.password.value = "";
      this.notice.hidden = true;
      this.setMode("login");
      await this.onLoggedIn();
    });
  }

  async busy(work) {
    this.error.textContent = "";
    this.submitButton.disabled = true;
    try {
      await work();
    } catch (err) {
      this.error.textContent = authMessage(err);
    } finally {
      this.submitButton.disabled = false;
    }
  }

  /** Sent; after repeated failures the server first wants a proof-of-work: solved here. */
  async send(json) {
    const path = MODES[this.mode].path;
    try {
      return await api("POST", path, { json });
    } catch (err) {
      if (err.code !== "challenge_required" || json.altcha) throw err;
      this.error.textContent = "Checking this is not a bot…";
      const altcha = await solveChallenge();
      this.error.textContent = "";
      return await api("POST", path, { json: { ...json, altcha } });
    }
  }
}

function authMessage(err) {
  if (err.status === 429 && err.retryAfter !== null) {
    return `Too many attempts. Try again in ${duration(err.retryAfter)}.`;
  }
  if (err.status === 0) return "Cannot reach the server. Check your connection and try again.";
  return err.message;
}

export async function logout() {
  await api("POST", "/api/auth/logout");
}

/** The footer: who is logged in, their tier, the token budget left. */
export class AccountPanel {
  constructor(notices) {
    this.notices = notices;
    this.email = byId("account-email");
    this.tier = byId("account-tier");
    this.meter = byId("budget-meter");
    this.text = byId("budget-text");
    this.budget = byId("budget");
    this.onUser = () => {}; // (the user's row arrived: main.js shows their theme)
  }

  /** Load /api/me; throws ApiError (401 when logged out). */
  async load() {
    const me = await apiGet("/api/me");
    this.render(me);
    return me;
  }

  async refresh() {
    try {
      await this.load();
    } catch (err) {
      this.notices.error(err, "Could not refresh your budget");
    }
  }

  render(me) {
    applyTheme(me.user.theme);
    this.onUser(me.user);
    this.email.textContent = me.user.email;
    byId("admin-link").hidden = !["admin", "auditor"].includes(me.user.role);
    const tier = me.tier.name;
    this.tier.textContent = `${tier.charAt(0).toUpperCase()}${tier.slice(1)} tier`;
    this.tier.title = `Up to ${number(me.tier.max_output_tokens)} tokens an answer, ` +
      `${me.tier.max_concurrent_runs} at a time`;
    const budget = me.budget;
    if (!budget) {
      this.meter.hidden = true;
      this.text.textContent = `${number(me.tier.tokens_per_minute)} tokens a minute`;
      return;
    }
    this.meter.hidden = false;
    this.meter.max = budget.limit_tokens;
    this.meter.value = Math.max(0, budget.remaining_tokens);
    this.meter.low = budget.limit_tokens * 0.2;
    this.meter.optimum = budget.limit_tokens;
    const left = `${number(Math.max(0, budget.remaining_tokens))} of ${number(budget.limit_tokens)} tokens left`;
    const refill = budget.resets_in_seconds > 0 ? ` · full in ${duration(budget.resets_in_seconds)}` : "";
    this.text.textContent = left + refill;
    this.scheduleRefresh(budget.resets_in_seconds);
  }

  /** While the budget refills, show it refilling (at most every REFRESH_SECONDS). */
  scheduleRefresh(resetsIn) {
    clearTimeout(this.timer);
    if (resetsIn <= 0) return;
    const seconds = Math.min(REFRESH_SECONDS, Math.ceil(resetsIn));
    this.timer = setTimeout(() => {
      if (!document.getElementById("shell").hidden) this.refresh();
    }, seconds * 1000);
  }
}
