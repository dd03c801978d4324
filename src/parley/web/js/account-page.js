// The account page (/account): change the password (the other sessions end), the
// sessions with their device and address (end one, or all), API keys (made with scopes
// and an end, the secret shown once; revoked), and the theme (kept on the server).

import { api, apiGet } from "./api.js";
import { applyTheme, byId, h } from "./dom.js";
import { Notices } from "./notices.js";

const when = (t) => (t ? new Date(t).toLocaleString() : "never");

/** A user agent as a person names it: the browser and the system, or the program. */
function device(agent) {
  if (!agent) return "unknown";
  const browser = /(Firefox|Edg|Chrome|Chromium|Safari)\/[\d.]+/.exec(agent);
  const system = /(Windows|Mac OS X|Android|iPhone|Linux)/.exec(agent);
  if (browser) return `${browser[1] === "Edg" ? "Edge" : browser[1]}${system ? ` on ${system[1]}` : ""}`;
  return agent.slice(0, 60);
}

class AccountPage {
  constructor() {
    this.notices = new Notices();
    this.notices.onUnauthenticated = () => window.location.assign("/");
    byId("password-form").addEventListener("submit", (e) => this.changePassword(e));
    byId("logout-all").addEventListener("click", () => this.logoutAll());
    byId("key-form").addEventListener("submit", (e) => this.createKey(e));
    byId("theme").addEventListener("change", (e) => this.setTheme(e.target.value));
    byId("instructions-form").addEventListener("submit", (e) => this.saveInstructions(e));
  }

  async saveInstructions(event) {
    event.preventDefault();
    try {
      const instructions = byId("my-instructions").value.trim();
      await api("PATCH", "/api/me", { json: { instructions } });
      byId("instructions-status").textContent = instructions ? "Saved: every new answer heeds them." : "Cleared.";
    } catch (err) {
      this.notices.error(err, "Could not save your instructions");
    }
  }

  async setTheme(theme) {
    try {
      const user = await api("PATCH", "/api/me", { json: { theme } });
      applyTheme(user.theme);
      byId("theme-status").textContent = "Saved for every device.";
    } catch (err) {
      this.notices.error(err, "Could not change the theme");
    }
  }

  async start() {
    try {
      const me = await apiGet("/api/me");
      byId("me").textContent = me.user.email;
      applyTheme(me.user.theme);
      byId("theme").value = me.user.theme;
      byId("theme").disabled = false;
      byId("my-instructions").value = me.user.instructions || "";
      byId("my-instructions").disabled = false; // (typed before it loaded, it would be lost)
    } catch (err) {
      return this.notices.error(err);
    }
    await Promise.all([this.loadSessions(), this.loadKeys()]);
  }

  async changePassword(event) {
    event.preventDefault();
    const json = {
      current_password: byId("current-password").value,
      new_password: byId("new-password").value,
    };
    try {
      const done = await api("POST", "/api/auth/password", { json });
      byId("password-status").textContent =
        `Password changed; ${done.other_sessions_ended} other session(s) ended.`;
      event.target.reset();
      await this.loadSessions();
    } catch (err) {
      this.notices.error(err, "Could not change the password");
    }
  }

  async loadSessions() {
    try {
      const { data } = await apiGet("/api/sessions");
      byId("sessions").querySelector("tbody").replaceChildren(...data.map((s) => h("tr", {},
        h("td", { title: s.user_agent || "" }, device(s.user_agent), s.current ? " (this one)" : ""),
        h("td", {}, s.address || ""),
        h("td", {}, when(s.created_at)),
        h("td", {}, when(s.last_used_at)),
        h("td", {}, s.current ? "" : h("button", { type: "button", class: "link",
          onclick: () => this.endSession(s.id) }, "End")))));
    } catch (err) {
      this.notices.error(err, "Could not list your sessions");
    }
  }

  async endSession(id) {
    try {
      await api("DELETE", `/api/sessions/${encodeURIComponent(id)}`);
      await this.loadSessions();
    } catch (err) {
      this.notices.error(err, "Could not end the session");
    }
  }

  async logoutAll() {
    try {
      await api("POST", "/api/auth/logout-all");
      window.location.assign("/");
    } catch (err) {
      this.notices.error(err, "Could not sign out everywhere");
    }
  }

  async loadKeys() {
    try {
      const { data } = await apiGet("/api/keys");
      byId("keys").querySelector("tbody").replaceChildren(...data.map((k) => h("tr", {},
        h("td", { dir: "auto" }, k.name),
        h("td", {}, `…${k.hint}`),
        h("td", {}, k.scopes.join(", ") + (k.models ? ` · ${k.models.join(", ")}` : "")),
        h("td", {}, k.expires_at ? when(k.expires_at) : "never"),
        h("td", {}, k.last_used_at ? `${when(k.last_used_at)}${k.last_used_address ? ` from ${k.last_used_address}` : ""}` : "never"),
        h("td", {}, h("button", { type: "button", class: "link danger",
          onclick: () => this.revokeKey(k) }, "Revoke")))));
    } catch (err) {
      this.notices.error(err, "Could not list your keys");
    }
  }

  async createKey(event) {
    event.preventDefault();
    const scopes = [...document.querySelectorAll("input[name=scope]:checked")].map((b) => b.value);
    const days = byId("key-days").value;
    const json = { name: byId("key-name").value.trim(), scopes };
    if (days) json.expires_in_days = Number(days);
    try {
      const made = await api("POST", "/api/keys", { json });
      const shown = byId("key-secret");
      shown.replaceChildren("Copy this key now: it is not shown again. ", h("code", {}, made.key));
      shown.hidden = false;
      event.target.reset();
      await this.loadKeys();
    } catch (err) {
      this.notices.error(err, "Could not create the key");
    }
  }

  async revokeKey(key) {
    try {
      await api("DELETE", `/api/keys/${encodeURIComponent(key.id)}`);
      await this.loadKeys();
    } catch (err) {
      this.notices.error(err, `Could not revoke ${key.name}`);
    }
  }
}

new AccountPage().start();
