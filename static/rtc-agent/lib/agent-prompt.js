// The agent prompt a new session starts with: `v1.message.send`'s `agent_prompt`, which the
// server keeps as a snapshot for the session's life (later sends, and every other session, are
// unaffected; a fork copies it). It is the embedding page's own prompt (the `agent-prompt`
// attribute or the `agentPrompt` property) followed by, where the page's VFS has `/AGENT.md`,
// that file's content: the original sends its AGENT.md snapshot as the agent prompt. The server
// takes at most 20,000 characters: /AGENT.md is cut first, then the page's prompt.

export const AGENT_MD = '/AGENT.md';
export const MAX_AGENT_PROMPT = 20000;

// Never end on the first half of a surrogate pair.
function cut(text, max) {
  let out = text.slice(0, Math.max(0, max));
  if (/[\uD800-\uDBFF]$/.test(out)) out = out.slice(0, -1);
  return out;
}

// The page's prompt and the /AGENT.md content (either may be empty) -> the agent_prompt to
// send ('' when there is neither).
export function composeAgentPrompt(pagePrompt, agentMd) {
  const page = String(pagePrompt || '').trim();
  const md = String(agentMd || '').trim();
  if (!md) return cut(page, MAX_AGENT_PROMPT);
  const open = `<file path="${AGENT_MD}">\n`;
  const close = '\n</file>';
  const head = page ? `${cut(page, MAX_AGENT_PROMPT)}\n\n` : '';
  const room = MAX_AGENT_PROMPT - head.length - open.length - close.length;
  const note = `\n[… ${AGENT_MD} was cut at ${MAX_AGENT_PROMPT.toLocaleString('en')} characters]`;
  if (room <= note.length) return head.trim();
  const body = md.length <= room ? md : cut(md, room - note.length) + note;
  return `${head}${open}${body}${close}`;
}

// Read /AGENT.md from the VFS ('' when there is none or it cannot be read).
export async function readAgentMd(vfs) {
  if (!vfs) return '';
  try {
    const file = await vfs.stat(AGENT_MD);
    return file ? String(file.content || '') : '';
  } catch (err) {
    console.warn('rtc-agent: /AGENT.md could not be read', err);
    return '';
  }
}
