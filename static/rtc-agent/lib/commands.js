// Slash commands typed in the composer (the original's command system): a message whose first
// word is `/name` (letters, digits, `-`, `_`; no second `/`, so a path such as
// `/notes/a.md what is this?` is still a message) is a command. The rest of the text is its
// arguments, as one raw string. Parsing only: lib/tasks.js runs them.
//   /goal                      show the session's goal
//   /goal <condition>          set it (v1.goal.set): the agent works until the condition holds
//   /goal clear | cancel       cancel it (v1.goal.cancel)
//   /loop <interval> [x<runs>] <prompt>   send <prompt> every <interval> (v1.loop.create)
//   /loop                      list the session's loops; /loop stop: stop them all
//   /compact [instruction]     compact the conversation now (v1.session.compact)
import { t as tr } from './i18n.js';

// `help` is read in the page's language when shown (a getter: the language may change).
export const COMMANDS = [
  { name: 'goal', usage: '/goal <condition>', get help() { return tr('cmd.help.goal'); } },
  { name: 'loop', usage: '/loop <interval> [x<runs>] <prompt>', get help() { return tr('cmd.help.loop'); } },
  { name: 'compact', usage: '/compact [instruction]', get help() { return tr('cmd.help.compact'); } },
];

const WORD = /^\/([A-Za-z][\w-]*)(?=\s|$)/;
const UNITS = { s: 1, m: 60, h: 3600, d: 86400 };

// `text` -> null (not a command: send it as a message) or {name, args} (`name` lower-cased;
// `known` false for a name that is not a command).
export function parseCommand(text) {
  const t = String(text || '').trim();
  const m = WORD.exec(t);
  if (!m) return null;
  const name = m[1].toLowerCase();
  return { name, args: t.slice(m[0].length).trim(), known: COMMANDS.some((c) => c.name === name) };
}

// The commands whose name starts with what is typed after `/` (the composer's hint).
export function commandHints(text) {
  const m = /^\/([A-Za-z][\w-]*)?$/.exec(String(text || '').trim());
  if (!m) return [];
  const typed = (m[1] || '').toLowerCase();
  return COMMANDS.filter((c) => c.name.startsWith(typed));
}

// "30s", "5m", "2h", "1d", "1h30m", "90 min" -> seconds; null when it is not an interval.
export function parseInterval(word) {
  const w = String(word || '').trim().toLowerCase()
    .replace(/(\d)\s*(?:secs?|seconds?)\b/g, '$1s').replace(/(\d)\s*(?:mins?|minutes?)\b/g, '$1m')
    .replace(/(\d)\s*(?:hrs?|hours?)\b/g, '$1h').replace(/(\d)\s*(?:days?)\b/g, '$1d');
  if (!/^(\d+(\.\d+)?[smhd])+$/.test(w)) return null;
  let seconds = 0;
  for (const [, n, unit] of w.matchAll(/(\d+(?:\.\d+)?)([smhd])/g)) seconds += Number(n) * UNITS[unit];
  seconds = Math.round(seconds);
  return seconds > 0 ? seconds : null;
}

// The arguments of `/loop` -> {interval_seconds, max_runs?, prompt} or {error}.
export function parseLoopArgs(args) {
  const words = String(args || '').trim().split(/\s+/).filter(Boolean);
  const usage = tr('cmd.loopUsage');
  if (!words.length) return { error: usage };
  // "every 5m" reads naturally too
  if (words[0].toLowerCase() === 'every') words.shift();
  // "90 min" is two words: join a bare number with the unit that follows it
  if (/^\d+(\.\d+)?$/.test(words[0] || '') && words[1] && parseInterval(`${words[0]}${words[1]}`)) {
    words.splice(0, 2, `${words[0]}${words[1]}`);
  }
  const interval = parseInterval(words[0]);
  if (!interval) {
    return { error: tr('cmd.notInterval', { word: words[0], usage }) };
  }
  const out = { interval_seconds: interval };
  const runs = /^[x×](\d+)$/i.exec(words[1] || '');
  if (runs) {
    out.max_runs = Number(runs[1]);
    if (!out.max_runs) return { error: tr('cmd.runsAtLeastOne') };
  }
  const prompt = words.slice(runs ? 2 : 1).join(' ');
  if (!prompt) return { error: tr('cmd.loopWhat', { interval: formatInterval(interval), usage }) };
  return { ...out, prompt };
}

// 300 -> "5 min", 5400 -> "1 h 30 min", 45 -> "45 s".
export function formatInterval(seconds) {
  let s = Math.max(0, Math.round(Number(seconds) || 0));
  const parts = [];
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]]) {
    if (s >= size) { parts.push(`${Math.floor(s / size)} ${unit}`); s %= size; }
  }
  return parts.join(' ') || '0 s';
}
