// <rtc-agent>: the embeddable widget, and `createRtcAgent(config)`, its factory (docs/widget.md
// is the integrator's reference). A floating bubble opens a panel (normal, maximised or
// minimised; or embedded in the page) with the session list, the conversation (under the
// context bar and the task panel), the voice call's panel, the composer and the file panel; "Memories" and
// "Functions" (the function debugger) take the conversation's place.
// Configuration: HTML attributes for simple pages (theme, lang, app-label, bubble-icon, logo,
// server-url, redirect-uri, database-name, agent-prompt, open, signin-hint, share-connection:
// lib/tabs.js), JS properties for
// the rest (auth or getToken, agentConfig, registry, windowConfig, activityBarConfig, on, logo).
// Events: lib/events.js. Functions: lib/functions.js. Tokens: lib/auth.js. Words: lib/i18n.js.
import { Agent, WORK_MODES } from './lib/agent.js';
import { defineRegistry, pageRegistry, registerFunction, registryFromConfig, invoke, Registry } from './lib/functions.js';
import { Events, DOM_EVENTS } from './lib/events.js';
import { Auth, normalizeAuth } from './lib/auth.js';
import { deviceId } from './lib/ids.js';
import { getLocale, localize, onLocale, resolveLocale, setLocale, switchLocale, t } from './lib/i18n.js';
import DOMPurify from './vendor/purify.es.mjs';
import { View, esc } from './views/base.js';
import './views/session-list.js';
import './views/message-list.js';
import './views/composer.js';
import './views/call-panel.js';
import './views/file-panel.js';
import './views/context-bar.js';
import './views/memory-page.js';
import './views/task-panel.js';
import './views/function-debugger.js';

export const VERSION = '0.2.0';
export const THEMES = ['light', 'dark', 'system'];
export const THEME_KEY = 'rtc-agent-theme';
const ACTIVITIES = ['files', 'memories', 'functions', 'settings'];
const MODES = { normal: 'normal', maximised: 'maximised', maximized: 'maximised', minimised: 'minimised',
  closed: 'closed', minimized: 'closed' }; // the original's "minimized" is the bubble: our "closed"
const CORNERS = ['bottom-right', 'bottom-left', 'top-right', 'top-left'];

// Light and dark values of the documented custom properties. A page's own rule on the element
// (`rtc-agent { --rtc-color-accent: … }`) wins over these in both themes; one for a theme only
// targets `rtc-agent[data-resolved-theme="dark"]`.
const LIGHT = `
  --rtc-color-surface: #fff; --rtc-color-surface-2: #fafbfd; --rtc-color-surface-3: #eef0f5;
  --rtc-color-text: #1d2330; --rtc-color-text-2: #4a5266; --rtc-color-muted: #5f677c;
  --rtc-color-border: #e3e6ee; --rtc-color-border-strong: #c9cfdb; --rtc-color-accent: #2952cc;
  --rtc-color-on-accent: #fff; --rtc-color-selected: #e6ecfb; --rtc-color-danger: #9b2a20;
  --rtc-color-danger-bg: #fdf1f0; --rtc-color-success: #1e6b32; --rtc-color-warning: #7a5a00;
  --rtc-color-link: #2952cc; --rtc-color-focus: #2952cc; --rtc-color-diff-add: #e2f4e6; --rtc-color-diff-del: #fbe4e2;
  color-scheme: light;`;
const DARK = `
  --rtc-color-surface: #171b24; --rtc-color-surface-2: #1e2330; --rtc-color-surface-3: #262c3b;
  --rtc-color-text: #e6e9f0; --rtc-color-text-2: #c3c8d4; --rtc-color-muted: #a3abbd;
  --rtc-color-border: #2f3646; --rtc-color-border-strong: #49526a; --rtc-color-accent: #3a63d8;
  --rtc-color-on-accent: #fff; --rtc-color-selected: #26335a; --rtc-color-danger: #ff9b90;
  --rtc-color-danger-bg: #3a1f1d; --rtc-color-success: #8ad69c; --rtc-color-warning: #f2cf6b;
  --rtc-color-link: #9db7ff; --rtc-color-focus: #9db7ff; --rtc-color-diff-add: #1d3b28; --rtc-color-diff-del: #4a2320;
  color-scheme: dark;`;

// Inline SVG or an image URL from the page (logo, bubble icon): SVG/HTML is sanitised.
function graphic(value, alt = '') {
  const v = String(value || '').trim();
  if (!v) return '';
  if (v.startsWith('<')) return DOMPurify.sanitize(v, { USE_PROFILES: { svg: true, svgFilters: true, html: true }, FORBID_TAGS: ['style', 'foreignObject'] });
  return `<img src="${esc(v)}" alt="${esc(alt)}">`;
}

function storedTheme() {
  try { const v = localStorage.getItem(THEME_KEY); return THEMES.includes(v) ? v : null; } catch { return null; }
}

class RtcAgent extends View {
  static styles = View.css(`
    :host { ${LIGHT} --rtc-bubble-size: 56px; --rtc-window-default-width: 760px; --rtc-window-default-height: 620px;
      position: fixed; right: 20px; bottom: 20px; z-index: 2147483000; }
    :host([data-resolved-theme="dark"]) { ${DARK} }
    :host([data-embedded]) { position: relative; inset: auto; display: block; z-index: auto; width: 100%; height: 100%; min-height: 360px; }
    .bubble { width: var(--rtc-bubble-size); height: var(--rtc-bubble-size); border-radius: 50%; background: var(--rtc-color-accent); color: var(--rtc-color-on-accent);
      border: 0; font-size: calc(var(--rtc-bubble-size) * .43); box-shadow: 0 4px 14px rgba(0,0,0,.25); padding: 0; display: flex; align-items: center; justify-content: center; overflow: hidden; }
    .bubble svg, .bubble img { width: 60%; height: 60%; }
    .panel { position: fixed; right: 20px; bottom: calc(var(--rtc-bubble-size) + 32px);
      width: min(var(--rtc-window-default-width), calc(100vw - 40px)); height: min(var(--rtc-window-default-height), calc(100vh - 110px));
      min-width: 300px; min-height: 240px; max-width: calc(100vw - 8px); max-height: calc(100vh - 8px);
      background: var(--rtc-color-surface); color: var(--rtc-color-text); border-radius: 12px; box-shadow: 0 10px 40px rgba(0,0,0,.25);
      display: flex; flex-direction: column; overflow: hidden; container-type: inline-size; }
    .panel.resizable { resize: both; }
    .panel.maximised { inset: 12px !important; width: auto; height: auto; resize: none; }
    .panel.minimised { height: 46px; min-height: 0; resize: none; }
    .panel.minimised .body, .panel.minimised .page, .panel.minimised .fnpage { display: none; }
    .panel.embedded { position: absolute; inset: 0 !important; width: auto; height: auto; border-radius: 0; box-shadow: none; resize: none;
      border: 1px solid var(--rtc-color-border); min-width: 0; }
    header { display: flex; flex-wrap: wrap; gap: 6px 8px; align-items: center; padding: 8px 10px; border-bottom: 1px solid var(--rtc-color-border); }
    header .title { flex: 1; display: flex; gap: 6px; align-items: center; min-width: 0; font-weight: 700; }
    header .title span { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
    .panel.draggable header .title { cursor: move; }
    .logo { display: inline-flex; width: 22px; height: 22px; }
    .logo svg, .logo img { width: 100%; height: 100%; }
    header button { padding: 1px 7px; }
    .conn { font-size: 12px; padding: 1px 8px; border-radius: 10px; background: #fbe4e2; color: #8a2219; }
    .conn[data-state="connected"] { background: #e2f4e6; color: #1a5e2c; }
    .conn[data-state="connecting"] { background: #fff3d6; color: #654a00; }
    .body { flex: 1; display: grid; grid-template-columns: 190px 1fr; min-height: 0; position: relative; }
    .body.files { grid-template-columns: 190px 1fr 240px; }
    .page, .fnpage { flex: 1; display: flex; min-height: 0; }
    header button[aria-pressed="true"] { background: var(--rtc-color-selected); border-color: var(--rtc-color-accent); }
    .chat { display: flex; flex-direction: column; min-height: 0; min-width: 0; }
    rtc-message-list { flex: 1; }
    .err { background: var(--rtc-color-danger-bg); color: var(--rtc-color-danger); font-size: 12px; padding: 3px 10px; }
    .signin { flex: 1; display: flex; flex-direction: column; gap: 12px; align-items: center; justify-content: center; padding: 24px; text-align: center; color: var(--rtc-color-text-2); }
    .signin .logo { width: 64px; height: 64px; }
    [data-act="sessions"] { display: none; }
    /* Narrow panels (a phone, a thin embedded column): one column; "Sessions" shows the list. */
    @container (max-width: 600px) {
      .body, .body.files { grid-template-columns: 1fr; }
      .body rtc-session-list, .body rtc-file-panel { display: none; }
      .body.show-sessions rtc-session-list { display: block; position: absolute; inset: 0 25% 0 0; z-index: 2; box-shadow: 4px 0 16px rgba(0,0,0,.2); }
      .body.files rtc-file-panel { display: block; position: absolute; inset: 0 0 0 15%; z-index: 2; background: var(--rtc-color-surface); box-shadow: -4px 0 16px rgba(0,0,0,.2); }
      [data-act="sessions"] { display: inline-block; }
      header select { max-width: 92px; }
      header .title { flex: 1 1 90px; }
    }
    @media (max-width: 600px) {
      .panel:not(.embedded), .panel.maximised:not(.embedded) { inset: 0 !important; width: auto; height: auto; border-radius: 0; max-width: none; resize: none; }
      .panel.minimised:not(.embedded) { top: auto !important; height: 46px; }
      header [data-act="max"] { display: none; } /* the panel fills the screen already */
    }
  `);

  constructor() {
    super();
    this.mode = 'closed';
    this._getToken = null;
    this._auth = null;
    this.events = new Events(this);
    this.registryFromConfig = null;
    this._registry = null;
    this._windowConfig = null;
    this._activityBarConfig = null;
    this._logo = null;
    this.cleanups = []; // functions run by destroy(): listeners of the page, the system theme…
    this.root.innerHTML = `
      <div class="panel" part="panel" role="dialog" aria-modal="false" hidden>
        <header part="header"><span class="title" part="title"><span class="logo" part="logo" hidden></span><span class="label"></span></span>
          <span class="conn" part="connection" role="status" data-state="disconnected"></span>
          <select name="mode" data-i18n-title="header.workMode" data-i18n-aria-label="header.workMode">${WORK_MODES.map((m) => `<option value="${m}">${m}</option>`).join('')}</select>
          <button type="button" data-act="sessions" aria-pressed="false" data-i18n="header.sessions" data-i18n-title="header.sessionsTitle"></button>
          <button type="button" data-act="memories" aria-pressed="false" hidden data-i18n="header.memories" data-i18n-title="header.memoriesTitle"></button>
          <button type="button" data-act="files" aria-pressed="false" data-i18n="header.files" data-i18n-title="header.filesTitle"></button>
          <button type="button" data-act="functions" aria-pressed="false" hidden data-i18n="header.functions" data-i18n-title="header.functionsTitle"></button>
          <button type="button" data-act="min" data-i18n-title="header.minimise" data-i18n-aria-label="header.minimise">_</button>
          <button type="button" data-act="max" data-i18n-title="header.maximise" data-i18n-aria-label="header.maximise">□</button>
          <button type="button" data-act="close" data-i18n-title="header.close" data-i18n-aria-label="header.close">×</button></header>
        <div class="err" role="alert" hidden></div>
        <div class="signin" part="signin"><span class="logo" hidden></span><p></p><span class="login"></span></div>
        <div class="body" hidden><rtc-session-list></rtc-session-list><div class="chat"><rtc-context-bar></rtc-context-bar><rtc-task-panel></rtc-task-panel><rtc-message-list></rtc-message-list><rtc-call-panel hidden></rtc-call-panel><rtc-composer></rtc-composer></div></div>
        <div class="page" hidden><rtc-memory-page></rtc-memory-page></div>
        <div class="fnpage" hidden><rtc-function-debugger></rtc-function-debugger></div>
      </div>
      <button type="button" class="bubble" part="bubble" aria-expanded="false"></button>`;
    this.panel = this.root.querySelector('.panel');
    this.root.querySelector('.bubble').onclick = () => this.setMode(this.mode === 'closed' ? this.restoreMode() : 'closed');
    this.root.querySelector('header').addEventListener('click', (e) => {
      const act = e.target.closest('button')?.dataset.act;
      if (act === 'close') this.setMode('closed');
      else if (act === 'min') this.setMode(this.mode === 'minimised' ? 'normal' : 'minimised');
      else if (act === 'max') this.setMode(this.mode === 'maximised' ? 'normal' : 'maximised');
      else if (act === 'files') this.filesButton();
      else if (act === 'memories') this.toggleMemories();
      else if (act === 'functions') this.toggleFunctions();
      else if (act === 'sessions') this.toggleSessions();
    });
    this.root.querySelector('select').onchange = (e) => this.agent && this.agent.setWorkMode(e.target.value);
    this.root.querySelector('rtc-function-debugger').host = {
      functions: () => this.functionList(),
      call: (fn, args, log) => (this.agent ? this.agent.callFunction(fn, args, log)
        : invoke(fn, args, { emit: (n, d) => this.events.emit(n, d), log })),
    };
    this.setupDrag();
    this.offPageRegistry = pageRegistry.onChange(() => this.functionsChanged());
  }

  static get observedAttributes() {
    return ['open', 'signin-hint', 'theme', 'lang', 'app-label', 'bubble-icon', 'logo', 'server', 'server-url',
      'redirect-uri', 'database-name'];
  }

  attributeChangedCallback(name, _old, value) {
    if (name === 'open') this.setMode(value === null ? 'closed' : MODES[value] || 'normal');
    else if (name === 'signin-hint') this.showSignin();
    else if (name === 'theme') this.applyTheme();
    else if (name === 'lang') this.refreshLocale();
    else if (name === 'app-label' || name === 'bubble-icon' || name === 'logo') this.renderBrand();
  }

  // --- properties ------------------------------------------------------------------------------
  get getToken() { return this._getToken; }
  set getToken(fn) { this._getToken = fn; this.maybeStart(); }

  // One of the auth modes of lib/auth.js; replaces `getToken` when both are set.
  get auth() { return this._auth; }
  set auth(value) { normalizeAuth(value); this._auth = value; this.maybeStart(); }

  get agentPrompt() { return this._agentPrompt ?? (this.getAttribute('agent-prompt') || ''); }
  set agentPrompt(text) { this._agentPrompt = text === null || text === undefined ? null : String(text); }

  get theme() {
    const attr = this.getAttribute('theme');
    return THEMES.includes(attr) ? attr : storedTheme() || 'system';
  }
  set theme(value) {
    if (!THEMES.includes(value)) throw new Error(`theme must be one of ${THEMES.join(', ')}`);
    this.setAttribute('theme', value);
  }
  get resolvedTheme() { return this.getAttribute('data-resolved-theme') || 'light'; }
  get locale() { return getLocale(); }

  get appLabel() { return this.getAttribute('app-label') || t('app.label'); }
  set appLabel(v) { if (v === null || v === undefined) this.removeAttribute('app-label'); else this.setAttribute('app-label', v); }
  get bubbleIcon() { return this.getAttribute('bubble-icon'); }
  set bubbleIcon(v) { if (v === null || v === undefined) this.removeAttribute('bubble-icon'); else this.setAttribute('bubble-icon', v); }
  get serverUrl() { return this.getAttribute('server-url') || this.getAttribute('server') || ''; }
  set serverUrl(v) { this.setAttribute('server-url', v); }
  get redirectUri() {
    const v = this.getAttribute('redirect-uri');
    return v ? new URL(v, location.href).toString() : `${location.origin}/auth/callback.html`;
  }
  set redirectUri(v) { this.setAttribute('redirect-uri', v); }
  get databaseName() { return this.getAttribute('database-name') || ''; }
  // Tabs of this site share one connection (lib/tabs.js); read when the widget starts.
  get shareConnection() { return this.hasAttribute('share-connection'); }
  set shareConnection(on) { this.toggleAttribute('share-connection', !!on); }
  set databaseName(v) { this.setAttribute('database-name', v); }

  // `{light, dark}` (SVG markup or image URLs), or one string for both; else the `logo` attribute.
  get logo() { return this._logo ?? this.getAttribute('logo'); }
  set logo(v) { this._logo = v ?? null; this.renderBrand(); }

  // The config's callbacks (`on.ready`, `on.beforeMessageSend`, `on.toolCallStart`, …).
  get on() { return this.events.on; }
  set on(callbacks) { this.events.on = { ...(callbacks || {}) }; }

  // Declarative functions: {name, description, persona, groups: [{name, description, functions}]}.
  get agentConfig() { return this._agentConfig || null; }
  set agentConfig(config) {
    this._agentConfig = config || null;
    this.registryFromConfig = config ? registryFromConfig(config) : null;
    this.functionsChanged();
  }

  // Imperative functions: a registry of defineRegistry(); changes show at once.
  get registry() { return this._registry; }
  set registry(registry) {
    if (registry && !(registry instanceof Registry)) throw new Error('registry must come from defineRegistry()');
    if (this.offRegistry) this.offRegistry();
    this._registry = registry || null;
    this.offRegistry = registry ? registry.onChange(() => this.functionsChanged()) : null;
    this.functionsChanged();
  }

  get windowConfig() { return this._windowConfig; }
  set windowConfig(config) { this._windowConfig = config ? { ...config } : null; this.applyWindowConfig(); }

  get activityBarConfig() { return this._activityBarConfig; }
  set activityBarConfig(config) { this._activityBarConfig = config ? { ...config } : null; this.applyActivityBar(); }

  get embedded() { return !!(this._windowConfig && this._windowConfig.embedded); }

  // Everything of createRtcAgent's config (also usable on an element made in HTML).
  configure(config = {}) {
    const attr = (name, value) => { if (value !== undefined && value !== null && value !== '') this.setAttribute(name, String(value)); };
    attr('app-label', config.appLabel);
    attr('theme', config.theme);
    attr('lang', config.lang);
    attr('database-name', config.databaseName);
    attr('bubble-icon', config.bubbleIcon);
    attr('signin-hint', config.signinHint);
    if (config.shareConnection) this.shareConnection = true;
    const server = config.server;
    attr('server-url', typeof server === 'string' ? server : server && server.url);
    attr('server-url', config.serverUrl);
    attr('redirect-uri', server && typeof server === 'object' ? server.redirectUri : undefined);
    attr('redirect-uri', config.redirectUri);
    if (config.on) this.on = config.on;
    if (config.logo !== undefined) this.logo = config.logo;
    if (config.agentPrompt !== undefined) this.agentPrompt = config.agentPrompt;
    if (config.window || config.windowConfig) this.windowConfig = config.window || config.windowConfig;
    if (config.activityBar || config.activityBarConfig) this.activityBarConfig = config.activityBar || config.activityBarConfig;
    const agentConfig = config.agentConfig || (config.groups || config.functions || config.persona || config.agentName ? {
      name: config.agentName || '', description: config.agentDescription || '', persona: config.persona || '',
      groups: config.groups || [], functions: config.functions || [],
    } : null);
    if (agentConfig) this.agentConfig = agentConfig;
    if (config.registry) this.registry = config.registry;
    if (config.auth) this.auth = config.auth;
    else if (config.getToken) this.getToken = config.getToken;
    if (config.open) this.setAttribute('open', config.open === true ? '' : config.open);
    return this;
  }

  connectedCallback() {
    super.connectedCallback();
    // A page may set properties before this element was defined: they sit on the instance and
    // would hide the class's accessors; they are taken over here.
    for (const prop of ['getToken', 'auth', 'agentPrompt', 'agentConfig', 'registry', 'windowConfig', 'activityBarConfig', 'on', 'logo', 'theme', 'appLabel']) {
      if (!Object.hasOwn(this, prop)) continue;
      const value = this[prop];
      delete this[prop];
      this[prop] = value;
    }
    if (this.destroyed) return;
    if (!this.localeWatch) {
      this.localeWatch = onLocale(() => this.renderWords());
      this.cleanups.push(() => this.localeWatch());
      const media = matchMedia('(prefers-color-scheme: dark)');
      const onScheme = () => this.applyTheme();
      media.addEventListener('change', onScheme);
      this.cleanups.push(() => media.removeEventListener('change', onScheme));
    }
    this.refreshLocale();
    this.applyTheme();
    this.renderBrand();
    this.applyWindowConfig();
    this.applyActivityBar();
    this.showSignin();
    this.maybeStart();
  }

  // --- start, sign-in --------------------------------------------------------------------------
  authSource() {
    if (this._auth) return this._auth;
    if (this._getToken) return { getToken: this._getToken };
    return null;
  }

  // Until the page hands over a token the panel says what to do, instead of an empty list that
  // looks broken. The host can word it (`signin-hint="…"`).
  showSignin() {
    const text = this.getAttribute('signin-hint') || t('signin.hint');
    this.root.querySelector('.signin p').textContent = text;
    const conn = this.root.querySelector('.conn');
    if (!this.started) { conn.dataset.state = 'disconnected'; conn.textContent = t('conn.signedOut'); }
    const source = this.authSource();
    // A provider that says nobody is signed in: its own sign-in (`on.authLoginRequested`, or
    // the provider's `login()`) from a button here.
    const slot = this.root.querySelector('.signin .login');
    if (source && typeof source.isLoggedIn === 'function') {
      // Only then in the DOM (its words would otherwise join the hint's text).
      if (!slot.firstChild) {
        slot.innerHTML = '<button type="button" class="primary" data-act="login"></button>';
        slot.firstChild.onclick = () => this.requestLogin();
      }
      slot.firstChild.textContent = t('signin.button');
    } else slot.textContent = '';
  }

  requestLogin() {
    this.events.emit('authLoginRequested', {});
    const source = this.authSource();
    if (source && typeof source.login === 'function') Promise.resolve(source.login()).then(() => this.maybeStart(), (e) => console.error('rtc-agent: login', e));
  }

  // When the provider's sign-in finished without a page reload.
  refreshAuth() { this.showSignin(); this.maybeStart(); }

  maybeStart() {
    const source = this.authSource();
    if (this.started || this.destroyed || !source || !this.isConnected) return;
    if (typeof source.isLoggedIn === 'function' && !safeCall(source.isLoggedIn)) { this.showSignin(); return; }
    this.started = true;
    this.root.querySelector('.signin').hidden = true;
    this.root.querySelector('.body').hidden = false;
    const server = new URL(this.serverUrl || location.origin, location.href).origin;
    const auth = new Auth(source, { server, deviceId: deviceId(), emit: (name, detail) => this.events.emit(name, detail) });
    const agent = new Agent({
      server, auth, getAgentPrompt: () => this.composedPrompt(), emit: (name, detail) => this.events.emit(name, detail),
      functions: () => this.functionList(), beforeSend: (text) => this.events.beforeMessageSend(text),
      dbPrefix: this.databaseName, shareConnection: this.shareConnection,
    });
    agent.functionGroups = () => this.functionGroups();
    this.agent = agent;
    for (const sel of ['rtc-session-list', 'rtc-message-list', 'rtc-call-panel', 'rtc-composer', 'rtc-context-bar', 'rtc-task-panel', 'rtc-memory-page']) this.root.querySelector(sel).agent = agent;
    this.applyActivityBar();
    agent.start().then(() => {
      if (this.destroyed) return;
      this.ready = true;
      this.events.emit('ready', {});
      const first = this._activityBarConfig && this._activityBarConfig.defaultActivity;
      if (first === 'functions') this.toggleFunctions(true);
      else if (first === 'memories') agent.memories.openPage();
      else if (first === 'files') this.toggleFiles(true);
    }).catch((err) => { if (!this.destroyed) agent.fail(err); });
  }

  // Sign out (provider mode: its logout()); the widget tears down like destroy() but stays on
  // the page, showing the sign-in state. `rtc-auth-logout` fires.
  async logout() {
    if (!this.agent) return;
    const agent = this.agent;
    this.stopAgent();
    await agent.auth.logout().catch((err) => console.error('rtc-agent: logout', err));
    this.root.querySelector('.body').hidden = true;
    this.root.querySelector('.page').hidden = true;
    this.root.querySelector('.fnpage').hidden = true;
    this.root.querySelector('.signin').hidden = false;
    this.shownPage = null;
    this.showSignin();
  }

  stopAgent() {
    if (!this.agent) return;
    const agent = this.agent;
    if (this._unsub) this._unsub(); // View's store subscription (set by `this.agent = …`)
    this._unsub = null;
    this._agent = null;
    this.started = false;
    this.ready = false;
    agent.destroy();
  }

  // The page's prompt for a new session: the agentConfig's (or registry's) name, description
  // and persona, then `agent-prompt` / `agentPrompt`.
  composedPrompt() {
    const src = this._agentConfig || this._registry || null;
    const parts = [];
    if (src && (src.name || src.description || src.persona)) {
      const head = [src.name && `You are ${src.name}.`, src.description].filter(Boolean).join(' ');
      parts.push([head, src.persona].filter(Boolean).join('\n\n'));
    }
    if (this.agentPrompt) parts.push(this.agentPrompt);
    return parts.join('\n\n');
  }

  // --- functions -------------------------------------------------------------------------------
  // The element's agentConfig, then its registry, then the page's registerFunction ones; a
  // path registered twice is the first one's.
  functionList() {
    const seen = new Map();
    for (const reg of [this.registryFromConfig, this._registry, pageRegistry]) {
      if (!reg) continue;
      for (const fn of reg.list()) if (!seen.has(fn.path)) seen.set(fn.path, fn);
    }
    return [...seen.values()];
  }

  functionGroups() {
    const groups = new Map();
    for (const reg of [pageRegistry, this._registry, this.registryFromConfig]) if (reg) for (const [k, v] of reg.groups) groups.set(k, v);
    return groups;
  }

  functionsChanged() {
    if (this.destroyed) return;
    const dbg = this.root.querySelector('rtc-function-debugger');
    if (dbg && !this.root.querySelector('.fnpage').hidden) dbg.render();
    if (this.agent && this.ready) this.agent.functionsChanged();
    this.applyActivityBar();
  }

  // --- look: theme, language, brand ------------------------------------------------------------
  applyTheme() {
    if (this.destroyed) return;
    const theme = this.theme;
    const resolved = theme === 'system' ? (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light') : theme;
    const before = this._themeSeen;
    this._themeSeen = `${theme}/${resolved}`;
    if (this.getAttribute('data-resolved-theme') !== resolved) this.setAttribute('data-resolved-theme', resolved);
    if (before !== undefined && before !== this._themeSeen) this.events.emit('themeChange', { theme, resolved });
  }

  refreshLocale() {
    const next = resolveLocale(this.getAttribute('lang'));
    const before = getLocale();
    setLocale(next);
    this.renderWords();
    if (before !== next && this.isConnected) this.events.emit('langChange', { lang: next });
  }

  renderWords() {
    localize(this.root);
    this.renderBrand();
    this.showSignin();
    if (this.agent) this.update(this.agent.store.state);
  }

  renderBrand() {
    const label = this.appLabel;
    this.root.querySelector('header .label').textContent = label;
    this.panel.setAttribute('aria-label', label);
    const bubble = this.root.querySelector('.bubble');
    bubble.setAttribute('aria-label', t(this.mode === 'closed' ? 'bubble.open' : 'bubble.close', { label }));
    bubble.title = bubble.getAttribute('aria-label');
    const icon = this.bubbleIcon;
    const iconHtml = icon ? graphic(icon) : '✦';
    if (bubble.dataset.icon !== iconHtml) { bubble.innerHTML = iconHtml; bubble.dataset.icon = iconHtml; }
    const logo = this.logo;
    const pick = logo && typeof logo === 'object' ? logo[this.resolvedTheme] || logo.light || logo.dark : logo;
    const html = pick ? graphic(pick, label) : '';
    for (const el of this.root.querySelectorAll('.logo')) {
      el.hidden = !html;
      if (el.dataset.src !== html) { el.innerHTML = html; el.dataset.src = html; }
    }
  }

  // --- window and activity bar -----------------------------------------------------------------
  applyWindowConfig() {
    if (!this.isConnected && !this._windowConfig) return;
    const c = this._windowConfig || {};
    const embedded = !!c.embedded;
    this.toggleAttribute('data-embedded', embedded);
    this.panel.classList.toggle('embedded', embedded);
    this.panel.classList.toggle('draggable', !embedded && c.draggable !== false);
    this.panel.classList.toggle('resizable', !embedded && c.resizable !== false);
    const show = (act, on) => { this.root.querySelector(`[data-act=${act}]`).hidden = !on; };
    show('min', !embedded && c.showMinimize !== false);
    show('max', !embedded && c.showMaximize !== false);
    show('close', !embedded && c.showClose !== false);
    this.root.querySelector('.bubble').hidden = embedded;
    const size = c.initialSize || {};
    const px = (v) => (typeof v === 'number' ? `${v}px` : v);
    if (size.width) this.panel.style.setProperty('--rtc-window-default-width', px(size.width));
    if (size.height) this.panel.style.setProperty('--rtc-window-default-height', px(size.height));
    for (const [prop, key] of [['minWidth', 'min-width'], ['minHeight', 'min-height'], ['maxWidth', 'max-width'], ['maxHeight', 'max-height']]) {
      if (c[prop] !== undefined && Number.isFinite(c[prop])) this.panel.style.setProperty(key, px(c[prop]));
    }
    this.placeBubble(c.bubblePosition);
    if (embedded) this.setMode('maximised');
    else if (c.defaultMode && !this._modeSetByConfig && !this.hasAttribute('open')) {
      this._modeSetByConfig = true;
      this.setMode(MODES[c.defaultMode] || 'normal');
    }
  }

  // The bubble's corner and offset (the original's Cartesian offset: +x right, +y up); the
  // panel opens from the same corner, over the bubble.
  placeBubble(pos) {
    const corner = pos && CORNERS.includes(pos.corner) ? pos.corner : 'bottom-right';
    const off = (pos && pos.offset) || {};
    const x = Number(off.x ?? (corner.endsWith('right') ? -20 : 20));
    const y = Number(off.y ?? (corner.startsWith('bottom') ? 20 : -20));
    const [vertical, horizontal] = corner.split('-');
    const v = vertical === 'bottom' ? y : -y;
    const h = horizontal === 'right' ? -x : x;
    for (const side of ['top', 'bottom', 'left', 'right']) { this.style[side] = ''; }
    if (this.embedded) return;
    this.style[vertical] = `${v}px`;
    this.style[horizontal] = `${h}px`;
    if (this.dragged) return;
    for (const side of ['top', 'bottom', 'left', 'right']) this.panel.style[side] = '';
    this.panel.style[vertical] = `calc(${v}px + var(--rtc-bubble-size) + 12px)`;
    this.panel.style[horizontal] = `${h}px`;
  }

  applyActivityBar() {
    const c = this._activityBarConfig || {};
    const off = new Set((c.disabledActivities || []).filter((a) => ACTIVITIES.includes(a)));
    if (c.enableFunctionDebugger === false) off.add('functions');
    this.disabledActivities = off;
    const signedIn = !!this.agent;
    this.root.querySelector('[data-act=files]').hidden = off.has('files');
    this.root.querySelector('[data-act=memories]').hidden = !signedIn || off.has('memories');
    this.root.querySelector('[data-act=functions]').hidden = !signedIn || off.has('functions');
  }

  // Dragging by the title (pointer), or with the arrow keys while the title has focus (Shift:
  // faster); the panel stays inside the window.
  setupDrag() {
    const title = this.root.querySelector('header .title');
    title.tabIndex = -1;
    const move = (left, top) => {
      const r = this.panel.getBoundingClientRect();
      left = Math.max(0, Math.min(innerWidth - r.width, left));
      top = Math.max(0, Math.min(innerHeight - r.height, top));
      Object.assign(this.panel.style, { left: `${left}px`, top: `${top}px`, right: 'auto', bottom: 'auto' });
      this.dragged = true;
    };
    const canDrag = () => this.panel.classList.contains('draggable') && this.mode === 'normal';
    title.addEventListener('pointerdown', (e) => {
      if (!canDrag() || e.button !== 0) return;
      const r = this.panel.getBoundingClientRect();
      const dx = e.clientX - r.left;
      const dy = e.clientY - r.top;
      title.setPointerCapture(e.pointerId);
      const onMove = (ev) => move(ev.clientX - dx, ev.clientY - dy);
      const onUp = () => { title.removeEventListener('pointermove', onMove); title.removeEventListener('pointerup', onUp); };
      title.addEventListener('pointermove', onMove);
      title.addEventListener('pointerup', onUp);
    });
    title.addEventListener('keydown', (e) => {
      const step = e.shiftKey ? 50 : 10;
      const d = { ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step] }[e.key];
      if (!d || !canDrag()) return;
      e.preventDefault();
      const r = this.panel.getBoundingClientRect();
      move(r.left + d[0], r.top + d[1]);
    });
  }

  // --- rendering -------------------------------------------------------------------------------
  update(state) {
    if (!this.agent) return;
    const conn = this.root.querySelector('.conn');
    conn.dataset.state = state.connection;
    conn.textContent = t(`conn.${state.connection}`);
    this.root.querySelector('select').value = state.workMode;
    const err = this.root.querySelector('.err');
    err.hidden = !state.error;
    err.innerHTML = state.error ? `${esc(state.error)} <button type="button">${esc(t('error.dismiss'))}</button>` : '';
    if (state.error) err.querySelector('button').onclick = () => this.agent.store.set({ error: '' });
    this.showPage(state.page);
  }

  // The memories page and the function debugger take the conversation's place (which stays as
  // it was, hidden); focus goes to the page, and back to its header button when it closes.
  showPage(page) {
    if (page === this.shownPage) return;
    const was = this.shownPage;
    this.shownPage = page;
    this.root.querySelector('.body').hidden = page === 'memories' || page === 'functions';
    this.root.querySelector('.page').hidden = page !== 'memories';
    this.root.querySelector('.fnpage').hidden = page !== 'functions';
    for (const act of ['memories', 'functions']) this.root.querySelector(`[data-act=${act}]`).setAttribute('aria-pressed', String(page === act));
    if (page === 'memories') this.root.querySelector('rtc-memory-page').shown();
    else if (page === 'functions') {
      const dbg = this.root.querySelector('rtc-function-debugger');
      dbg.render();
      dbg.root.querySelector('nav button')?.focus();
    } else if (was === 'memories' || was === 'functions') this.root.querySelector(`[data-act=${was}]`).focus();
  }

  // From another page, "Files" goes back to the conversation with the files shown.
  filesButton() {
    if (this.agent && this.agent.store.state.page !== 'chat') {
      this.agent.store.set({ page: 'chat' });
      if (this.root.querySelector('rtc-file-panel')) return;
    }
    this.toggleFiles();
  }

  toggleMemories() {
    if (!this.agent) return;
    if (this.agent.store.state.page === 'memories') this.agent.memories.closePage();
    else this.agent.memories.openPage();
  }

  toggleFunctions(open) {
    if (!this.agent) return;
    const showing = this.agent.store.state.page === 'functions';
    this.agent.store.set({ page: (open ?? !showing) ? 'functions' : 'chat' });
  }

  toggleSessions() {
    const body = this.root.querySelector('.body');
    const on = body.classList.toggle('show-sessions');
    this.root.querySelector('[data-act=sessions]').setAttribute('aria-pressed', String(on));
  }

  restoreMode() { return this._windowConfig && MODES[this._windowConfig.defaultMode] && MODES[this._windowConfig.defaultMode] !== 'closed' ? MODES[this._windowConfig.defaultMode] : 'normal'; }

  setMode(mode) {
    if (this.embedded && mode !== 'maximised') mode = 'maximised';
    this.mode = mode;
    this.panel.hidden = mode === 'closed';
    this.panel.classList.toggle('maximised', mode === 'maximised');
    this.panel.classList.toggle('minimised', mode === 'minimised');
    const bubble = this.root.querySelector('.bubble');
    bubble.setAttribute('aria-expanded', String(mode !== 'closed'));
    this.renderBrand();
  }

  toggleFiles(open) {
    const body = this.root.querySelector('.body');
    let panel = body.querySelector('rtc-file-panel');
    this.root.querySelector('[data-act=files]').setAttribute('aria-pressed', String(!panel || open === true));
    if (panel) { if (open !== true) { panel.remove(); body.classList.remove('files'); } return; }
    panel = document.createElement('rtc-file-panel');
    body.appendChild(panel);
    body.classList.add('files');
    if (this.agent) panel.agent = this.agent;
  }

  // --- teardown --------------------------------------------------------------------------------
  // In order: `rtc-before-destroy`, off the page, pending token requests rejected, the socket
  // closed (with the agent's timers, uploads and database), the element's own listeners, then
  // the config's callbacks dropped. The element cannot be used again.
  destroy() {
    if (this.destroyed) return;
    this.events.emit('beforeDestroy', {});
    this.destroyed = true;
    this.remove();
    if (this.agent) this.agent.auth.abort();
    this.stopAgent();
    for (const fn of this.cleanups.splice(0)) { try { fn(); } catch (err) { console.error('rtc-agent: cleanup', err); } }
    if (this.offPageRegistry) this.offPageRegistry();
    if (this.offRegistry) this.offRegistry();
    this.events.on = {};
    this.events.target = null;
    this._getToken = null;
    this._auth = null;
  }
}

function safeCall(fn) { try { return !!fn(); } catch { return false; } }

customElements.define('rtc-agent', RtcAgent);

// The factory: an element configured from `config`, not yet on the page (append it yourself).
export function createRtcAgent(config = {}) {
  const el = document.createElement('rtc-agent');
  el.configure(config);
  return el;
}

// Theme of every widget on the page, remembered (localStorage `rtc-agent-theme`).
export function switchTheme(theme) {
  if (!THEMES.includes(theme)) throw new Error(`theme must be one of ${THEMES.join(', ')}`);
  try { localStorage.setItem(THEME_KEY, theme); } catch { /* applied anyway */ }
  for (const el of document.querySelectorAll('rtc-agent')) el.setAttribute('theme', theme);
}

export { defineRegistry, registerFunction, switchLocale, DOM_EVENTS };

const api = { createRtcAgent, defineRegistry, registerFunction, switchLocale, switchTheme, VERSION, events: DOM_EVENTS };
window.RtcAgent = Object.assign(window.RtcAgent || {}, api);
window.rtcAgent = Object.assign(window.rtcAgent || {}, { registerFunction, defineRegistry, createRtcAgent });
