// The element's events, two ways as the original: a DOM event `rtc-…` (kebab-case) on the
// element, and the `on.<camelCase>` callback of createRtcAgent's config. Tool call events are
// callbacks only (frequent; the original keeps them off the DOM too). A throwing callback is
// logged and never breaks the widget.
export const DOM_EVENTS = {
  ready: 'rtc-agent-ready',
  beforeDestroy: 'rtc-before-destroy',
  themeChange: 'rtc-theme-change',
  langChange: 'rtc-lang-change',
  beforeMessageSend: 'rtc-before-message-send',
  connectionStateChange: 'rtc-connection-state-change',
  authLogin: 'rtc-auth-login',
  authLoginRequested: 'rtc-auth-login-requested',
  authError: 'rtc-auth-refresh-failed',
  authLogout: 'rtc-auth-logout',
  sessionCreated: 'rtc-session-created',
  sessionSwitched: 'rtc-session-switched',
  sessionRenamed: 'rtc-session-renamed',
  sessionDeleted: 'rtc-session-deleted',
  messageSent: 'rtc-message-sent',
  messageReceived: 'rtc-message-received',
  callStarted: 'rtc-call-started',
  callConnected: 'rtc-call-connected',
  callEnded: 'rtc-call-ended',
};
export const CALLBACK_ONLY = ['toolCallStart', 'toolCallSuccess', 'toolCallError', 'toolCallProgress'];

export class Events {
  constructor(target) {
    this.target = target;
    this.on = {}; // the config's callbacks, by camelCase name
  }

  callback(name, detail) {
    const fn = this.on && this.on[name];
    if (typeof fn !== 'function') return undefined;
    try { return fn(detail); } catch (err) { console.error(`rtc-agent: on.${name} threw`, err); return undefined; }
  }

  // Fire one event: the callback, then the DOM event (not for tool calls).
  emit(name, detail = {}) {
    this.callback(name, detail);
    const type = DOM_EVENTS[name];
    if (type && this.target) this.target.dispatchEvent(new CustomEvent(type, { detail }));
  }

  // rtc-before-message-send: `{message: {content, metadata}}`. The callback may answer false (or
  // a promise of false) and a DOM listener may call preventDefault() to cancel; both may rewrite
  // `message.content` in place. -> the message to send, or null when cancelled.
  async beforeMessageSend(content, metadata = {}) {
    const detail = { message: { content, metadata } };
    const fn = this.on && this.on.beforeMessageSend;
    if (typeof fn === 'function') {
      let verdict;
      try { verdict = await fn(detail); } catch (err) { console.error('rtc-agent: on.beforeMessageSend threw', err); verdict = false; }
      if (verdict === false) return null;
    }
    const event = new CustomEvent(DOM_EVENTS.beforeMessageSend, { detail, cancelable: true });
    if (this.target && !this.target.dispatchEvent(event)) return null;
    return { content: String(detail.message.content ?? ''), metadata: detail.message.metadata || {} };
  }
}
