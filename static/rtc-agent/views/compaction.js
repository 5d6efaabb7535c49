// The compaction mark in the conversation. A compaction (manual, automatic at the threshold, or
// from the session memory) stores a `summary` message whose data is `[{title?, content}]`: the
// summary first, then the files the model had read, re-injected (titles "File: <path>"). It is
// written after the conversation it compacted, but its `parent_message_id` names the first
// message it kept verbatim: the mark is drawn right before that message (everything above it
// is what the summary replaced for the model; nothing is removed from the screen).
import { t } from '../lib/i18n.js';

const FILE_TITLE = 'File: ';

const isSummary = (m) => !!(m && m.content && m.content.type === 'summary');

// `items` (in offset order) with each summary moved before the message it keeps from, when that
// message is among them (a later compaction may keep from an earlier summary: nested).
export function placeSummaries(items) {
  const ids = new Set(items.map((m) => m.id));
  const before = new Map(); // message id -> the summaries drawn before it
  const rest = [];
  for (const m of items) {
    const anchor = isSummary(m) ? m.parent_message_id : null;
    if (anchor && anchor !== m.id && ids.has(anchor)) {
      if (!before.has(anchor)) before.set(anchor, []);
      before.get(anchor).push(m);
    } else rest.push(m);
  }
  if (!before.size) return items;
  const out = [];
  const done = new Set();
  const emit = (m) => {
    if (done.has(m.id)) return;
    done.add(m.id);
    for (const s of before.get(m.id) || []) emit(s);
    out.push(m);
  };
  rest.forEach(emit);
  items.forEach(emit); // a cycle of anchors (never written by the server) still shows everything
  return out;
}

// The mark and the summary (collapsed), as HTML; `markdown(text)` renders sanitised Markdown.
export function summaryHtml(m, markdown, esc) {
  const parts = Array.isArray(m.content.data) ? m.content.data.filter((p) => p && typeof p === 'object') : [];
  const files = parts.filter((p) => String(p.title || '').startsWith(FILE_TITLE));
  const texts = parts.filter((p) => !files.includes(p));
  const label = (texts[0] && texts[0].title) || t('compact.summary');
  const body = texts.map((p, i) => `${i && p.title ? `### ${p.title}\n\n` : ''}${String(p.content || '')}`).join('\n\n');
  const fileList = files.length
    ? `<div class="files-back"><div class="muted">${esc(t('compact.files'))}</div>${files.map((f) => `<details class="file">`
      + `<summary>${esc(String(f.title).slice(FILE_TITLE.length))}</summary><pre><code>${esc(f.content)}</code></pre></details>`).join('')}</div>`
    : '';
  const words = esc(t('compact.mark'));
  return `<div class="compaction" part="compaction" role="separator" aria-label="${words}"><span class="label">${words}</span></div>`
    + `<details class="summary" part="summary"><summary>${esc(label)}</summary><div class="md">${markdown(body)}</div>${fileList}</details>`;
}
