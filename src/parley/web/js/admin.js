// The admin console (/admin): users (find, change tier, role, disable, end sessions,
// revoke keys, a one-time password reset link) and the audit log (read, filter, verify, export). An auditor sees the
// same page with nothing to change; anyone else is sent back to the app.

import { api, apiGet } from "./api.js";
import { applyTheme, byId, h } from "./dom.js";
import { Notices } from "./notices.js";

const ACTIONS = [
  "account.signup", "session.login", "session.login_failed", "session.logout",
  "session.logout_everywhere", "session.ended", "account.password_changed", "account.deleted",
  "api_key.created", "api_key.revoked", "user.created", "user.tier_changed", "user.role_changed",
  "user.disabled", "user.enabled", "user.sessions_ended", "user.keys_revoked", "share.created",
  "share.revoked", "export.downloaded", "user.linked", "user.email_changed", "admin.read",
  "audit.pruned", "account.password_reset", "user.reset_link_made", "account.email_confirmed",
];
const MODELS_REFRESH_MS = 10_000;
const ROLES = ["user", "auditor", "admin"];

class Console {
  constructor() {
    this.notices = new Notices();
    this.notices.onUnauthenticated = () => window.location.assign("/");
    this.users = byId("users").querySelector("tbody");
    this.audit = byId("audit").querySelector("tbody");
    this.after = null;
    this.before = null;
    byId("user-search").addEventListener("submit", (e) => {
      e.preventDefault();
      this.loadUsers(true);
    });
    byId("users-more").addEventListener("click", () => this.loadUsers(false));
    byId("audit-more").addEventListener("click", () => this.loadAudit(false));
    byId("audit-verify").addEventListener("click", () => this.verify());
    const select = byId("audit-action");
    select.append(...ACTIONS.map((a) => h("option", { value: a }, a)));
    select.addEventListener("change", () => this.loadAudit(true));
    const today = new Date().toISOString().slice(0, 10);
    byId("usage-since").value = today;
    byId("usage-until").value = today;
    byId("usage-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.loadUsage();
    });
  }

  /** Each model's load, and per worker its engine and a fleet's replicas with their health. */
  async loadModels() {
    try {
      const { data } = await apiGet("/api/admin/models");
      byId("models").querySelector("tbody").replaceChildren(...data.flatMap(modelRows));
      byId("models-status").textContent = `as of ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      this.notices.error(err, "Could not read the models");
    }
  }

  async loadRefused() {
    try {
      const { data } = await apiGet("/api/admin/refused?limit=50");
      byId("refused").querySelector("tbody").replaceChildren(...data.map((r) => h("tr", {},
        h("td", {}, r.finished_at ? new Date(r.finished_at).toLocaleString() : ""),
        h("td", { dir: "auto" }, r.email), h("td", {}, r.stage),
        h("td", {}, `${r.code}: ${r.message || ""}`))));
    } catch (err) {
      this.notices.error(err, "Could not list refused runs");
    }
  }

  async loadUsage() {
    const query = new URLSearchParams({ since: byId("usage-since").value, until: byId("usage-until").value });
    byId("usage-csv").href = `/api/admin/usage?${query}&format=csv`;
    try {
      const report = await apiGet(`/api/admin/usage?${query}`);
      byId("usage").querySelector("tbody").replaceChildren(...report.data.map((r) => h("tr", {},
        h("td", {}, r.day), h("td", { dir: "auto" }, r.email), h("td", {}, r.model),
        h("td", {}, r.api_key_id || "session"), h("td", {}, r.source), h("td", {}, String(r.runs)),
        h("td", {}, String(r.prompt_tokens)), h("td", {}, String(r.completion_tokens)))));
      byId("usage-total").textContent =
        `${report.prompt_tokens} prompt and ${report.completion_tokens} completion tokens in all`;
    } catch (err) {
      this.notices.error(err, "Could not read usage");
    }
  }

  async start() {
    let me;
    try {
      me = await apiGet("/api/me");
    } catch (err) {
      return this.notices.error(err);
    }
    applyTheme(me.user.theme);
    if (!["admin", "auditor"].includes(me.user.role)) return window.location.assign("/");
    this.canChange = me.user.role === "admin";
    this.tiers = Object.keys((await apiGet("/api/admin/tiers")).tiers);
    byId("admin-who").textContent = `${me.user.email} (${me.user.role})`;
    byId("models-refresh").addEventListener("click", () => this.loadModels());
    setInterval(() => this.loadModels(), MODELS_REFRESH_MS);
    await Promise.all([this.loadUsers(true), this.loadAudit(true), this.loadUsage(), this.loadRefused(),
      this.loadModels()]);
  }

  async loadUsers(fresh) {
    if (fresh) this.after = null;
    const query = new URLSearchParams({ limit: "50" });
    const q = byId("user-query").value.trim();
    if (q) query.set("q", q);
    if (this.after) query.set("after", this.after);
    try {
      const page = await apiGet(`/api/admin/users?${query}`);
      if (fresh) this.users.replaceChildren();
      this.users.append(...page.data.map((u) => this.userRow(u)));
      this.after = page.next_after;
      byId("users-more").hidden = !this.after;
    } catch (err) {
      this.notices.error(err, "Could not list users");
    }
  }

  userRow(user) {
    const row = h("tr", { dataset: { userId: user.id } });
    const change = (body) => this.change(user, body, row);
    const disabled = !this.canChange;
    const tier = h("select", { "aria-label": `Tier of ${user.email}`, disabled, onchange: (e) => change({ tier: e.target.value }) },
      ...this.tiers.map((t) => h("option", { value: t, selected: t === user.tier }, t)));
    const role = h("select", { "aria-label": `Role of ${user.email}`, disabled, onchange: (e) => change({ role: e.target.value }) },
      ...ROLES.map((r) => h("option", { value: r, selected: r === user.role }, r)));
    const off = h("input", { type: "checkbox", "aria-label": `${user.email} disabled`, checked: user.disabled, disabled,
      onchange: (e) => change({ disabled: e.target.checked }) });
    const ends = h("button", { type: "button", class: "link", disabled, onclick: () => this.count(user, "sessions/end", "sessions ended") }, "End sessions");
    const keys = h("button", { type: "button", class: "link", disabled, onclick: () => this.count(user, "keys/revoke", "keys revoked") }, "Revoke keys");
    const link = h("button", { type: "button", class: "link", disabled, onclick: () => this.resetLink(user, row) }, "Reset link");
    row.append(h("td", { dir: "auto" }, user.email), h("td", {}, tier), h("td", {}, role), h("td", {}, off),
      h("td", {}, ends, " ", keys, " ", link));
    return row;
  }

  /** A one-time password reset link to hand to the user (no mail needed). */
  async resetLink(user, row) {
    try {
      const made = await api("POST", `/api/admin/users/${encodeURIComponent(user.id)}/reset-link`);
      const until = new Date(made.expires_at).toLocaleTimeString();
      const shown = h("p", { class: "notice reset-link" }, `Hand this to ${user.email} (works once, until ${until}): `,
        h("code", {}, made.url));
      // (the row shown now: a change answered meanwhile has replaced the one clicked)
      this.shownRow(user, row).querySelector("td:last-child").append(shown);
      await this.loadAudit(true);
    } catch (err) {
      this.notices.error(err, `Could not make a reset link for ${user.email}`);
    }
  }

  async change(user, body, row) {
    try {
      const changed = await api("PATCH", `/api/admin/users/${encodeURIComponent(user.id)}`, { json: body });
      const shown = this.shownRow(user, row);
      const fresh = this.userRow(changed);
      fresh.querySelector("td:last-child").append(...shown.querySelectorAll(".reset-link")); // kept
      shown.replaceWith(fresh);
      await this.loadAudit(true);
    } catch (err) {
      this.notices.error(err, `Could not change ${user.email}`);
      await this.loadUsers(true);
    }
  }

  /** The user's row on the page now (`row`, unless a change has replaced it since). */
  shownRow(user, row) {
    return row.isConnected ? row : byId("users").querySelector(`tr[data-user-id="${CSS.escape(user.id)}"]`) || row;
  }

  async count(user, what, done) {
    try {
      const { count } = await api("POST", `/api/admin/users/${encodeURIComponent(user.id)}/${what}`);
      byId("audit-status").textContent = `${user.email}: ${count} ${done}`;
      await this.loadAudit(true);
    } catch (err) {
      this.notices.error(err, `Could not change ${user.email}`);
    }
  }

  async loadAudit(fresh) {
    if (fresh) this.before = null;
    const query = new URLSearchParams({ limit: "100" });
    const action = byId("audit-action").value;
    if (action) query.set("action", action);
    if (this.before) query.set("before", String(this.before));
    try {
      const page = await apiGet(`/api/admin/audit?${query}`);
      if (fresh) this.audit.replaceChildren();
      this.audit.append(...page.data.map((r) => h("tr", { dataset: { seq: String(r.seq) } },
        h("td", {}, String(r.seq)),
        h("td", {}, new Date(r.at).toLocaleString()),
        h("td", {}, r.action),
        h("td", { dir: "auto" }, r.actor),
        h("td", {}, r.target_id || ""),
        h("td", {}, [r.address, r.user_agent].filter(Boolean).join(" · ")),
        h("td", { class: "audit-detail" }, JSON.stringify(r.detail)))));
      this.before = page.next_before;
      byId("audit-more").hidden = !this.before;
    } catch (err) {
      this.notices.error(err, "Could not read the audit log");
    }
  }

  async verify() {
    const status = byId("audit-status");
    try {
      const found = await apiGet("/api/admin/audit/verify");
      status.textContent = found.ok
        ? "The chain holds: every record as written, none missing or moved."
        : `The chain is broken: ${found.breaks.map((b) => `#${b.seq} ${b.why}`).join("; ")}`;
      status.dataset.ok = String(found.ok);
    } catch (err) {
      this.notices.error(err, "Could not verify the audit log");
    }
  }
}

/** One row per replica (a row per engine when it has none; one for a model none reports). */
function modelRows(m) {
  const load = `${m.in_flight} in flight, ${m.slots} slots (${Math.round(m.load * 100)}%)`;
  const rows = [];
  for (const e of m.engines) {
    const engine = `${e.state}${e.stale ? " (stale)" : ""}${e.kv_blocks ? `, KV ${e.kv_blocks_used}/${e.kv_blocks}` : ""}`;
    const replicas = e.replicas.length ? e.replicas : [null];
    for (const r of replicas) {
      rows.push(h("tr", { class: r && !r.healthy ? "unhealthy" : "" },
        h("td", {}, m.model), h("td", {}, load), h("td", {}, e.worker_id), h("td", {}, engine),
        h("td", {}, r ? r.url : "built in"), h("td", {}, r ? (r.healthy ? "healthy" : "down") : e.state),
        h("td", {}, r ? String(r.in_flight) : String(e.batch_sequences)),
        h("td", {}, r ? String(r.served) : "")));
    }
  }
  if (!rows.length) {
    rows.push(h("tr", {}, h("td", {}, m.model), h("td", {}, load),
      h("td", { colspan: "6" }, "no worker has reported it")));
  }
  return rows;
}

new Console().start();
