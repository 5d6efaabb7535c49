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
  'mem.title': 'Your memories',
  'mem.export': 'Export JSON',
  'mem.back': 'Back to chat',
  'mem.searchForm': 'Search your memories',
  'mem.search': 'Search',
  'mem.searchPlaceholder': 'Words in a memory',
  'mem.category': 'Category',
  'mem.allCategories': 'All categories',
  'mem.importance': 'Importance',
  'mem.anyImportance': 'Any importance',
  'mem.cat.user': 'user',
  'mem.cat.feedback': 'feedback',
  'mem.cat.project': 'project',
  'mem.cat.reference': 'reference',
  'mem.imp.low': 'low',
  'mem.imp.medium': 'medium',
  'mem.imp.high': 'high',
  'mem.imp.critical': 'critical',
  'mem.retry': 'Retry',
  'mem.more': 'Load more',
  'mem.loadError': 'Could not load your memories: {error}',
  'mem.loading': 'Loading…',
  'mem.noMatch': 'No memory matches this search.',
  'mem.empty': 'No memories yet: what the agent learns about you and your work is kept here.',
  'mem.count.one': '{n} memory',
  'mem.count.other': '{n} memories',
  'mem.countMore.one': '{n} memory shown, more to load',
  'mem.countMore.other': '{n} memories shown, more to load',
  'mem.saved': 'saved {time}',
  'mem.edited': 'edited {time}',
  'mem.editForm': 'Edit memory',
  'mem.memory': 'Memory',
  'mem.save': 'Save',
  'mem.cancel': 'Cancel',
  'mem.deleteAsk': 'Delete this memory?',
  'mem.deleteWarn': 'Delete this memory? This cannot be undone.',
  'mem.delete': 'Delete',
  'mem.keep': 'Keep it',
  'mem.edit': 'Edit',
  'mem.editLabel': 'Edit memory: {text}',
  'mem.deleteLabel': 'Delete memory: {text}',
  'mem.emptyContent': 'A memory cannot be empty.',
  'mem.exported': 'Exported to {file}.',
  'mem.exportFailed': 'Export failed: {error}.',
  'ctx.pct': '{pct}% context',
  'ctx.sessionMemories': 'Session memories',
  'ctx.savedHere': 'Memories saved in this session',
  'ctx.allMemories': 'All your memories…',
  'ctx.loadError': 'Could not load the memories: {error}',
  'ctx.empty': 'Nothing saved in this session yet: what the agent keeps in memory shows here.',
  'ctx.keptTitle': 'Kept for your later sessions',
  'ctx.noteTitle': 'A note of this session',
  'ctx.memory': 'memory',
  'ctx.note': 'note',
  'ring.context': 'Context {pct}%',
  'ring.tokens': '{used} / {threshold} tokens',
  'ring.noFigures': 'no figures yet',
  'ring.due': 'compaction due',
  'ring.rounds.one': 'about {n} round until compaction',
  'ring.rounds.other': 'about {n} rounds until compaction',
  'ring.next': 'compaction at the next round',
  'ring.cost': 'cost {cost}',
  'task.goal': 'Goal',
  'task.todos': 'Todo list',
  'task.todosDone': '{done} of {total} done',
  'task.loops': 'Loops',
  'task.todo.pending': 'pending',
  'task.todo.in_progress': 'in progress',
  'task.todo.completed': 'completed',
  'task.goal.active': 'active',
  'task.goal.completed': 'completed',
  'task.goal.cancelled': 'cancelled',
  'task.goal.exhausted': 'rounds used up',
  'task.rounds': '{rounds} / {max} rounds',
  'task.roundsTitle': 'Rounds (turns) worked on the goal, of at most {max}',
  'task.cancelGoal': 'Cancel goal',
  'task.lineage': 'Sub-agent {title}, started by {parent}. Its conversation is read-only here.',
  'task.itsParent': 'its parent',
  'task.backParent': 'Back to the parent',
  'task.backParentConversation': 'Back to the parent conversation',
  'task.every': 'every {interval}',
  'task.runs.one': '{runs} of {max} run',
  'task.runs.other': '{runs} of {max} runs',
  'task.nextRun': 'next run {when}',
  'task.loop.stopped': 'stopped',
  'task.loop.finished': 'finished',
  'task.stop': 'Stop',
  'task.stopLabel': 'Stop the loop: {prompt}',
  'task.dueNow': 'due now',
  'task.in': 'in {interval}',
  'sa.working': 'working',
  'sa.done': 'done',
  'sa.failed': 'failed',
  'sa.stopped': 'stopped',
  'sa.title': 'Sub-agent',
  'sa.error': 'Error',
  'sa.more.one': '{n} more sub-agent: open it to see them',
  'sa.more.other': '{n} more sub-agents: open it to see them',
  'sa.open': 'Open',
  'sa.openLabel': 'Open the sub-agent {title}',
  'sa.nested': 'Sub-agents it started',
  'sa.top': 'Sub-agents started here',
  'compact.summary': 'Summary of the earlier conversation',
  'compact.files': 'Files given back to the model:',
  'compact.mark': 'Context compacted: the messages above are summarised for the model',
  'prompt.other': 'Other:',
  'prompt.otherPlaceholder': 'your answer',
  'msg.subAgents': 'Sub-agents',
  'msg.loading': 'Loading…',
  'msg.empty': 'Ask the agent anything. It works on files in this browser.',
  'msg.resultOf': 'Result of {tool}',
  'msg.error': 'Error',
  'msg.copied': 'Copied',
  'msg.copyFailed': 'Copy failed',
  'origin.goalSet': '◎ Goal set: sent for you',
  'origin.goalRound': '◎ Goal, round {round}: sent for you',
  'origin.loop': '↻ Loop: sent for you',
  'origin.loopTick': '↻ Loop, tick {tick}: sent for you',
  'upload.busyNotice': 'The attachments are still uploading: send once they are done.',
  'upload.failedNotice': 'An attachment failed to upload: retry it or remove it (×) before sending.',
  'send.waiting': 'Waiting for the attachments to upload',
  'send.failed': 'An attachment failed to upload',
  'send.title': 'Send',
  'upload.uploading': 'Uploading {name}',
  'upload.retryLabel': 'Retry uploading {name}',
  'upload.retry': 'Retry',
  'upload.cancelRemove': 'Cancel and remove {name}',
  'upload.removeLabel': 'Remove {name}',
  'upload.cancel': 'Cancel',
  'upload.remove': 'Remove',
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
  'mem.title': '你的记忆',
  'mem.export': '导出 JSON',
  'mem.back': '返回对话',
  'mem.searchForm': '搜索你的记忆',
  'mem.search': '搜索',
  'mem.searchPlaceholder': '记忆中的词语',
  'mem.category': '类别',
  'mem.allCategories': '全部类别',
  'mem.importance': '重要性',
  'mem.anyImportance': '任意重要性',
  'mem.cat.user': '个人',
  'mem.cat.feedback': '反馈',
  'mem.cat.project': '项目',
  'mem.cat.reference': '参考',
  'mem.imp.low': '低',
  'mem.imp.medium': '中',
  'mem.imp.high': '高',
  'mem.imp.critical': '关键',
  'mem.retry': '重试',
  'mem.more': '加载更多',
  'mem.loadError': '无法加载你的记忆：{error}',
  'mem.loading': '加载中…',
  'mem.noMatch': '没有符合搜索条件的记忆。',
  'mem.empty': '还没有记忆：助手了解到的关于你和你工作的信息会保存在这里。',
  'mem.count.one': '{n} 条记忆',
  'mem.count.other': '{n} 条记忆',
  'mem.countMore.one': '已显示 {n} 条记忆，还有更多',
  'mem.countMore.other': '已显示 {n} 条记忆，还有更多',
  'mem.saved': '保存于 {time}',
  'mem.edited': '编辑于 {time}',
  'mem.editForm': '编辑记忆',
  'mem.memory': '记忆内容',
  'mem.save': '保存',
  'mem.cancel': '取消',
  'mem.deleteAsk': '删除这条记忆？',
  'mem.deleteWarn': '删除这条记忆？此操作无法撤销。',
  'mem.delete': '删除',
  'mem.keep': '保留',
  'mem.edit': '编辑',
  'mem.editLabel': '编辑记忆：{text}',
  'mem.deleteLabel': '删除记忆：{text}',
  'mem.emptyContent': '记忆内容不能为空。',
  'mem.exported': '已导出到 {file}。',
  'mem.exportFailed': '导出失败：{error}。',
  'ctx.pct': '上下文 {pct}%',
  'ctx.sessionMemories': '本会话记忆',
  'ctx.savedHere': '本会话保存的记忆',
  'ctx.allMemories': '查看全部记忆…',
  'ctx.loadError': '无法加载记忆：{error}',
  'ctx.empty': '本会话还没有保存任何内容：助手记下的内容会显示在这里。',
  'ctx.keptTitle': '保留给你以后的会话',
  'ctx.noteTitle': '本会话的笔记',
  'ctx.memory': '记忆',
  'ctx.note': '笔记',
  'ring.context': '上下文 {pct}%',
  'ring.tokens': '{used} / {threshold} token',
  'ring.noFigures': '暂无数据',
  'ring.due': '需要压缩',
  'ring.rounds.one': '约 {n} 轮后压缩',
  'ring.rounds.other': '约 {n} 轮后压缩',
  'ring.next': '下一轮将压缩',
  'ring.cost': '费用 {cost}',
  'task.goal': '目标',
  'task.todos': '待办列表',
  'task.todosDone': '已完成 {done}/{total}',
  'task.loops': '循环任务',
  'task.todo.pending': '待处理',
  'task.todo.in_progress': '进行中',
  'task.todo.completed': '已完成',
  'task.goal.active': '进行中',
  'task.goal.completed': '已达成',
  'task.goal.cancelled': '已取消',
  'task.goal.exhausted': '轮数已用完',
  'task.rounds': '{rounds} / {max} 轮',
  'task.roundsTitle': '为该目标工作的轮数（回合），最多 {max} 轮',
  'task.cancelGoal': '取消目标',
  'task.lineage': '子代理 {title}，由 {parent} 启动。它的对话在这里只读。',
  'task.itsParent': '上级会话',
  'task.backParent': '返回上级会话',
  'task.backParentConversation': '返回上级对话',
  'task.every': '每 {interval}',
  'task.runs.one': '已运行 {runs}/{max} 次',
  'task.runs.other': '已运行 {runs}/{max} 次',
  'task.nextRun': '下次运行 {when}',
  'task.loop.stopped': '已停止',
  'task.loop.finished': '已结束',
  'task.stop': '停止',
  'task.stopLabel': '停止循环：{prompt}',
  'task.dueNow': '即将运行',
  'task.in': '{interval}后',
  'sa.working': '运行中',
  'sa.done': '已完成',
  'sa.failed': '失败',
  'sa.stopped': '已停止',
  'sa.title': '子代理',
  'sa.error': '错误',
  'sa.more.one': '还有 {n} 个子代理：打开查看',
  'sa.more.other': '还有 {n} 个子代理：打开查看',
  'sa.open': '打开',
  'sa.openLabel': '打开子代理 {title}',
  'sa.nested': '它启动的子代理',
  'sa.top': '在此启动的子代理',
  'compact.summary': '之前对话的摘要',
  'compact.files': '重新提供给模型的文件：',
  'compact.mark': '上下文已压缩：以上消息已为模型总结',
  'prompt.other': '其他：',
  'prompt.otherPlaceholder': '你的回答',
  'msg.subAgents': '子 agent',
  'msg.loading': '加载中…',
  'msg.empty': '向 agent 提问吧。它处理的是这个浏览器里的文件。',
  'msg.resultOf': '{tool} 的结果',
  'msg.error': '错误',
  'msg.copied': '已复制',
  'msg.copyFailed': '复制失败',
  'origin.goalSet': '◎ 已设定目标：代你发送',
  'origin.goalRound': '◎ 目标，第 {round} 轮：代你发送',
  'origin.loop': '↻ 循环：代你发送',
  'origin.loopTick': '↻ 循环，第 {tick} 次：代你发送',
  'upload.busyNotice': '附件仍在上传：上传完成后再发送。',
  'upload.failedNotice': '有附件上传失败：请重试或移除（×）后再发送。',
  'send.waiting': '正在等待附件上传',
  'send.failed': '有附件上传失败',
  'send.title': '发送',
  'upload.uploading': '正在上传 {name}',
  'upload.retryLabel': '重新上传 {name}',
  'upload.retry': '重试',
  'upload.cancelRemove': '取消并移除 {name}',
  'upload.removeLabel': '移除 {name}',
  'upload.cancel': '取消',
  'upload.remove': '移除',
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

// `t` of `key` when the widget has words for it, else `fallback` (a value from the server that
// has no translation, such as a category the widget does not know).
export function tOr(key, fallback, vars = {}) {
  return Object.hasOwn(EN, key) ? t(key, vars) : String(fallback ?? '');
}

// `${base}.one` or `${base}.other` by `n` (English has both; Chinese has one form written twice).
export function tn(base, n, vars = {}) {
  return t(`${base}.${Number(n) === 1 ? 'one' : 'other'}`, { n, ...vars });
}

// Durations of lib/commands.js's formatInterval ("1 h 5 min") in the current language.
export function localInterval(text) {
  if (getLocale() !== 'zh-CN') return text;
  const units = { d: '天', h: '小时', min: '分钟', s: '秒' };
  return String(text).replace(/(\d+) (d|h|min|s)\b/g, (_, n, u) => `${n} ${units[u]}`);
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
