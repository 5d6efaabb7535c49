// The widget's words in English and Chinese. The language is chosen, in this order, by the
// element's `lang` attribute (or `lang` property), the choice stored by `switchLocale`
// (localStorage `rtc-agent-locale`, as the original), then the browser's languages; English
// when none of them is Chinese. One language per page, like the original's switchLocale.
// Views mark words with `data-i18n="key"` (text), `data-i18n-title`, `data-i18n-aria-label`
// and `data-i18n-placeholder`; `localize(root)` fills them, and `onLocale(fn)` re-renders.
export const LOCALES = ['en-US', 'zh-CN'];
export const STORAGE_KEY = 'rtc-agent-locale';

const EN = {
  'app.label': 'Agent',
  'bubble.open': 'Open {label}',
  'bubble.close': 'Close {label}',
  'conn.connected': 'connected',
  'conn.connecting': 'connecting',
  'conn.disconnected': 'disconnected',
  'conn.signedOut': 'signed out',
  'header.workMode': 'Work mode',
  'header.sessions': 'Sessions',
  'header.sessionsTitle': 'Show the sessions',
  'header.memories': 'Memories',
  'header.memoriesTitle': 'Your memories',
  'header.files': 'Files',
  'header.filesTitle': 'Files',
  'header.functions': 'Functions',
  'header.functionsTitle': 'Function debugger',
  'header.minimise': 'Minimise',
  'header.maximise': 'Maximise',
  'header.close': 'Close',
  'header.signOut': 'Sign out',
  'signin.hint': 'You are not signed in yet. Sign in on this page, then the agent connects here.',
  'signin.button': 'Sign in',
  'error.dismiss': 'dismiss',
  'sessions.new': '+ New chat',
  'sessions.untitled': 'Untitled',
  'sessions.rename': 'Rename',
  'sessions.renamePrompt': 'Rename session',
  'sessions.compact': 'Compact',
  'sessions.compactTitle': 'Summarize the conversation so far to free context',
  'sessions.archive': 'Archive',
  'sessions.unarchive': 'Unarchive',
  'sessions.delete': 'Delete',
  'sessions.deleteConfirm': 'Delete "{title}"?',
  'sessions.working': 'working…',
  'sessions.list': 'Sessions',
  'composer.placeholder': 'Message the agent…',
  'composer.message': 'Message',
  'composer.send': 'Send',
  'composer.stop': 'Stop',
  'composer.attach': 'Attach files',
  'composer.cancelled': 'The page kept this message from being sent.',
  'fn.title': 'Functions',
  'fn.none': 'No functions are registered on this page.',
  'fn.pick': 'Pick a function to call it by hand.',
  'fn.params': 'Arguments (JSON)',
  'fn.run': 'Run',
  'fn.reset': 'Example arguments',
  'fn.result': 'Result',
  'fn.logs': 'Logs',
  'fn.history': 'History',
  'fn.class': 'Approval class',
  'fn.schema': 'Parameters (JSON Schema)',
  'fn.badJson': 'The arguments are not valid JSON: {error}',
  'fn.running': 'Running…',
  'fn.ok': 'Succeeded in {ms} ms',
  'fn.failed': 'Failed in {ms} ms',
  'fn.close': 'Back to the conversation',
  'msg.copy': 'Copy',
  'msg.fork': 'Fork',
  'msg.forkTitle': 'Edit and fork from here',
  'msg.thinking': 'Thinking',
  'msg.retry': 'Retry',
  'prompt.approve': 'Approve',
  'prompt.reject': 'Reject',
  'prompt.reason': 'Reason (optional)',
  'prompt.answer': 'Answer',
  'files.title': 'Files',
  'files.none': 'No files yet',
  'files.pick': 'Select a file to open it.',
  'files.attach': 'Attach',
  'files.attachLabel': 'Attach {path} to the message',
  'files.download': 'Download',
};

const ZH = {
  'app.label': '智能助手',
  'bubble.open': '打开{label}',
  'bubble.close': '关闭{label}',
  'conn.connected': '已连接',
  'conn.connecting': '连接中',
  'conn.disconnected': '已断开',
  'conn.signedOut': '未登录',
  'header.workMode': '工作模式',
  'header.sessions': '会话',
  'header.sessionsTitle': '显示会话列表',
  'header.memories': '记忆',
  'header.memoriesTitle': '你的记忆',
  'header.files': '文件',
  'header.filesTitle': '文件',
  'header.functions': '函数',
  'header.functionsTitle': '函数调试器',
  'header.minimise': '最小化',
  'header.maximise': '最大化',
  'header.close': '关闭',
  'header.signOut': '退出登录',
  'signin.hint': '你还没有登录。请先在本页登录，助手随后会在这里连接。',
  'signin.button': '登录',
  'error.dismiss': '关闭',
  'sessions.new': '+ 新对话',
  'sessions.untitled': '未命名',
  'sessions.rename': '重命名',
  'sessions.renamePrompt': '重命名会话',
  'sessions.compact': '压缩',
  'sessions.compactTitle': '总结目前的对话以释放上下文',
  'sessions.archive': '归档',
  'sessions.unarchive': '取消归档',
  'sessions.delete': '删除',
  'sessions.deleteConfirm': '删除“{title}”？',
  'sessions.working': '处理中…',
  'sessions.list': '会话',
  'composer.placeholder': '给助手发消息…',
  'composer.message': '消息',
  'composer.send': '发送',
  'composer.stop': '停止',
  'composer.attach': '添加附件',
  'composer.cancelled': '页面拦截了这条消息，未发送。',
  'fn.title': '函数',
  'fn.none': '本页没有注册任何函数。',
  'fn.pick': '选择一个函数手动调用。',
  'fn.params': '参数（JSON）',
  'fn.run': '运行',
  'fn.reset': '示例参数',
  'fn.result': '结果',
  'fn.logs': '日志',
  'fn.history': '历史',
  'fn.class': '审批类别',
  'fn.schema': '参数（JSON Schema）',
  'fn.badJson': '参数不是有效的 JSON：{error}',
  'fn.running': '运行中…',
  'fn.ok': '成功，用时 {ms} 毫秒',
  'fn.failed': '失败，用时 {ms} 毫秒',
  'fn.close': '返回对话',
  'msg.copy': '复制',
  'msg.fork': '分叉',
  'msg.forkTitle': '编辑并从这里分叉',
  'msg.thinking': '思考过程',
  'msg.retry': '重试',
  'prompt.approve': '批准',
  'prompt.reject': '拒绝',
  'prompt.reason': '理由（可选）',
  'prompt.answer': '回答',
  'files.title': '文件',
  'files.none': '还没有文件',
  'files.pick': '选择一个文件打开。',
  'files.attach': '附加',
  'files.attachLabel': '把 {path} 附加到消息',
  'files.download': '下载',
};

const STRINGS = { 'en-US': EN, 'zh-CN': ZH };
let current = null;
const listeners = new Set();

// 'zh', 'zh-Hans-CN', 'ZH_cn' -> 'zh-CN'; 'en', 'en-GB' -> 'en-US'; anything else -> null.
export function normalizeLocale(value) {
  const v = String(value || '').trim().toLowerCase().replace('_', '-');
  if (!v) return null;
  if (v === 'zh' || v.startsWith('zh-')) return 'zh-CN';
  if (v === 'en' || v.startsWith('en-')) return 'en-US';
  return null;
}

function stored() {
  try { return normalizeLocale(localStorage.getItem(STORAGE_KEY)); } catch { return null; }
}

// The language for an element whose `lang` attribute is `attr` (null: none).
export function resolveLocale(attr) {
  const fromAttr = normalizeLocale(attr);
  if (fromAttr) return fromAttr;
  const fromStore = stored();
  if (fromStore) return fromStore;
  for (const l of navigator.languages || [navigator.language]) {
    const n = normalizeLocale(l);
    if (n) return n;
  }
  return 'en-US';
}

export function getLocale() { return current || resolveLocale(null); }

// Make `locale` the page's language (no storing): every view re-renders its words.
export function setLocale(locale) {
  const next = normalizeLocale(locale) || 'en-US';
  if (next === current) return next;
  current = next;
  for (const fn of [...listeners]) {
    try { fn(next); } catch (err) { console.error('rtc-agent: locale listener', err); }
  }
  return next;
}

// The user's choice (a language menu of the page): stored, then applied.
export function switchLocale(locale) {
  const next = normalizeLocale(locale);
  if (!next) throw new Error(`unsupported locale: ${locale} (supported: ${LOCALES.join(', ')})`);
  try { localStorage.setItem(STORAGE_KEY, next); } catch { /* storage refused: applied anyway */ }
  for (const el of document.querySelectorAll('rtc-agent')) if (!el.hasAttribute('lang')) el.refreshLocale?.();
  return setLocale(next);
}

export function onLocale(fn) { listeners.add(fn); return () => listeners.delete(fn); }

export function t(key, vars = {}) {
  const table = STRINGS[getLocale()] || EN;
  const text = table[key] ?? EN[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => (name in vars ? String(vars[name]) : `{${name}}`));
}

// Fill the marked words of a (shadow) root in the current language.
export function localize(root, vars = {}) {
  for (const el of root.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n, vars);
  for (const [attr, data] of [['title', 'i18nTitle'], ['aria-label', 'i18nAriaLabel'], ['placeholder', 'i18nPlaceholder']]) {
    for (const el of root.querySelectorAll(`[data-${attr === 'aria-label' ? 'i18n-aria-label' : `i18n-${attr}`}]`)) {
      el.setAttribute(attr, t(el.dataset[data], vars));
    }
  }
}
