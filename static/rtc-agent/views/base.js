// Shared view helpers: escaping, a base class that binds an element to the agent's store, and
// the widget's stylesheet (adopted by every shadow root).
export const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

export const sheet = new CSSStyleSheet();
sheet.replaceSync(`
:host { font: 14px/1.45 system-ui, sans-serif; color: #1d2330; }
* { box-sizing: border-box; }
[hidden] { display: none !important; }
button { font: inherit; cursor: pointer; border: 1px solid #c9cfdb; background: #fff; border-radius: 6px; padding: 3px 9px; }
button.primary { background: #2952cc; color: #fff; border-color: #2952cc; }
button.danger { color: #b3261e; }
button:disabled { opacity: .5; cursor: default; }
input, textarea, select { font: inherit; border: 1px solid #c9cfdb; border-radius: 6px; padding: 4px 6px; }
pre { background: #f3f5f9; padding: 8px; border-radius: 6px; overflow: auto; position: relative; }
code { font-family: ui-monospace, monospace; font-size: 12.5px; }
.muted { color: #687087; font-size: 12px; }
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

  disconnectedCallback() { if (this._unsub) this._unsub(); this._unsub = null; }

  update() {}

  static css(text) { const s = new CSSStyleSheet(); s.replaceSync(text); return s; }
}
