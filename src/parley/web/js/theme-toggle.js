// The sidebar's theme button: system → light → dark, kept on the server for every device
// (the account page has the same choice).

import { api } from "./api.js";
import { applyTheme, byId } from "./dom.js";

const NEXT = { system: "light", light: "dark", dark: "system" };

export class ThemeToggle {
  constructor(notices) {
    this.notices = notices;
    this.button = byId("theme-toggle");
    this.theme = "system";
    this.button.addEventListener("click", () => this.cycle());
  }

  /** The user's theme as the server has it. */
  show(theme) {
    this.theme = theme || "system";
    this.button.textContent = `Theme: ${this.theme}`;
  }

  async cycle() {
    const theme = NEXT[this.theme];
    try {
      const user = await api("PATCH", "/api/me", { json: { theme } });
      applyTheme(user.theme);
      this.show(user.theme);
    } catch (err) {
      this.notices.error(err, "Could not change the theme");
    }
  }
}
