// The context ring: how full a session's context is, up to the point where it gets compacted,
// from the server's figures on the session entity (updated by its Updates, at most about once a
// second while a turn runs): `compression_progress` (0–100, what the ring draws),
// `current_context_tokens` against `compression_threshold`, `rounds_until_compression` (-1: over
// the threshold, compaction is due), `estimated_next_round_tokens` and `total_cost_usd`.
// Pure functions; the session list and the context bar draw them.
import { esc } from './base.js';
import { t, tn } from '../lib/i18n.js';

const LEVELS = [[100, 'over', '#b3261e'], [80, 'near', '#d9480f'], [50, 'filling', '#b07d00'], [0, 'ok', '#2952cc']];
const num = (n) => Number(n || 0).toLocaleString('en-US');

export function formatCost(usd) {
  const v = Number(usd || 0);
  return `$${v >= 1 ? v.toFixed(2) : v.toFixed(4)}`;
}

// {pct, level, color, known, tokens, rounds, cost, text}: `text` is the whole sentence (the
// tooltip and the accessible name), the other parts are for the context bar.
export function contextFigures(s) {
  const threshold = Number(s.compression_threshold || 0);
  const used = Number(s.current_context_tokens || 0);
  const known = threshold > 0;
  const raw = known ? Number(s.compression_progress || 0) : 0;
  const pct = Math.max(0, Math.round(raw));
  const [, level, color] = LEVELS.find(([min]) => raw >= min) || LEVELS[LEVELS.length - 1];
  const tokens = known ? t('ring.tokens', { used: num(used), threshold: num(threshold) }) : t('ring.noFigures');
  const r = Number(s.rounds_until_compression);
  let rounds = '';
  if (known && r < 0) rounds = t('ring.due');
  else if (known && r > 0) rounds = tn('ring.rounds', r, { n: num(r) });
  else if (known && r === 0 && Number(s.estimated_next_round_tokens || 0) > 0) rounds = t('ring.next');
  const cost = Number(s.total_cost_usd || 0) > 0 ? t('ring.cost', { cost: formatCost(s.total_cost_usd) }) : '';
  const text = [t('ring.context', { pct }), tokens, rounds, cost].filter(Boolean).join(' · ');
  return { pct, raw, level, color, known, tokens, rounds, cost, text };
}

// The ring as inline SVG: its <title> is the tooltip, its aria-label the same words.
export function ringSvg(s, size = 18) {
  const f = contextFigures(s);
  const c = 2 * Math.PI * 7;
  const dash = (c * Math.min(100, f.raw)) / 100;
  return `<svg class="ring" part="context-ring" width="${size}" height="${size}" viewBox="0 0 18 18" role="img" aria-label="${esc(f.text)}"
    data-progress="${esc(f.raw)}" data-level="${f.level}"><title>${esc(f.text)}</title>
    <circle cx="9" cy="9" r="7" fill="none" stroke="#e3e6ee" stroke-width="3"/>
    <circle cx="9" cy="9" r="7" fill="none" stroke="${f.color}" stroke-width="3" stroke-dasharray="${dash.toFixed(2)} ${c.toFixed(2)}" transform="rotate(-90 9 9)"/></svg>`;
}
