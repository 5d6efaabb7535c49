// Shared view helpers: escaping, a base class that binds an element to the agent's store, and
// the widget's stylesheet (adopted by every shadow root).
import { localize, onLocale } from '../lib/i18n.js';

export const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

export const sheet = new CSSStyleSheet();
sheet.replaceSync(`
:host { font: var(--rtc-font-size-user, 14px)/1.45 var(--rtc-font-family, system-ui, sans-serif); color: var(--rtc-color-text, #1d2330); }
* { box-sizing: border-box; }
[hidden] { display: none !important; }
button { font: inherit; cursor: pointer; border: 1px solid var(--rtc-color-border-strong, #c9cfdb); background: var(--rtc-color-surface, #fff); border-radius: 6px; padding: 3px 9px; }
button.primary { background: var(--rtc-color-accent, #2952cc); color: var(--rtc-color-on-accent, #fff); border-color: var(--rtc-color-accent, #2952cc); }
button.danger { color: var(--rtc-color-danger, #b3261e); }
button:disabled { opacity: .5; cursor: default; }
input, textarea, select { font: inherit; border: 1px solid var(--rtc-color-border-strong, #c9cfdb); border-radius: 6px; padding: 4px 6px;
  background: var(--rtc-color-surface, #fff); color: var(--rtc-color-text, #1d2330); }
:focus-visible { outline: 2px solid var(--rtc-color-focus, #2952cc); outline-offset: 1px; }
button { color: var(--rtc-color-text, #1d2330); }
button.primary { color: var(--rtc-color-on-accent, #fff); }
a { color: var(--rtc-color-link, #2952cc); }
pre { background: var(--rtc-color-surface-2, #f3f5f9); padding: 8px; border-radius: 6px; overflow: auto; position: relative; }
code { font-family: ui-monospace, monospace; font-size: 12.5px; }
.muted { color: var(--rtc-color-muted, #687087); font-size: 12px; }
.row { display: flex; gap: 6px; align-items: center; }
.grow { flex: 1; min-width: 0; }
`);

export class View extends HTMLElement {
  constructor() {
    super();
    this.root = this.attachShadow({ mode: 'open' });
    this.root.adoptedStyleSheets = [sheet, ...(this.constructor.styles ? [this.constructor.styles] : [])];
  }

  set agent(agent) {
    this._agent = agent;
    if (this._unsub) this._unsub();
    this._unsub = agent.store.subscribe((state) => this.update(state));
  }

  get agent() { return this._agent; }

  // Words follow the page's language (lib/i18n.js): marked ones are refilled, then a re-render.
  connectedCallback() {
    if (!this._offLocale) this._offLocale = onLocale(() => this.onLocaleChange());
    localize(this.root);
    if (this._agent && !this._unsub) this._unsub = this._agent.store.subscribe((state) => this.update(state));
  }

  disconnectedCallback() {
    if (this._unsub) this._unsub();
    this._unsub = null;
    if (this._offLocale) this._offLocale();
    this._offLocale = null;
  }

  onLocaleChange() {
    localize(this.root);
    if (this._agent) this.update(this._agent.store.state);
  }

  update() {}

  static css(text) { const s = new CSSStyleSheet(); s.replaceSync(text); return s; }
}
