// <rtc-approval>: what a tool call needing approval will do (a line diff for write/edit, the
// code for script, the parameters otherwise) with Approve / Reject (optional reason).
// <rtc-ask-user>: askUser's 1-4 questions, their options and an "Other" answer.
import { View, esc } from './base.js';
import { t } from '../lib/i18n.js';

const css = View.css(`
  :host { display: block; margin-top: 6px; border-top: 1px dashed var(--rtc-color-border-strong, #c9cfdb); padding-top: 6px; }
  .diff { font-family: ui-monospace, monospace; font-size: 12px; white-space: pre-wrap; max-height: 220px; overflow: auto; background: var(--rtc-color-surface-2, #f7f8fb); border-radius: 6px; padding: 4px; }
  .add { background: var(--rtc-color-diff-add, #e2f4e6); } .del { background: var(--rtc-color-diff-del, #fbe4e2); }
  fieldset { border: 1px solid var(--rtc-color-border, #e3e6ee); border-radius: 6px; margin: 0 0 6px; }
  label { display: block; } .desc { color: var(--rtc-color-muted, #687087); font-size: 12px; margin-left: 20px; }
`);

// Line diff by longest common subsequence (bounded; big files show everything as replaced).
export function lineDiff(a, b) {
  const x = a.split('\n'), y = b.split('\n');
  if (x.length * y.length > 250000) return [...x.map((l) => ['-', l]), ...y.map((l) => ['+', l])];
  const n = x.length, m = y.length;
  const t = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) t[i][j] = x[i] === y[j] ? t[i + 1][j + 1] + 1 : Math.max(t[i + 1][j], t[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push([' ', x[i]]); i++; j++; } else if (t[i + 1][j] >= t[i][j + 1]) out.push(['-', x[i++]]); else out.push(['+', y[j++]]);
  }
  while (i < n) out.push(['-', x[i++]]);
  while (j < m) out.push(['+', y[j++]]);
  return out;
}

class Approval extends View {
  static styles = css;

  set agent(agent) { this._agent = agent; this.render(); }
  get agent() { return this._agent; }

  async preview(rtc) {
    const p = rtc.parameters || {};
    if (rtc.tool_name === 'write' || rtc.tool_name === 'edit') {
      let before = '';
      try { before = await this.agent.vfs.readText(p.path); } catch { before = ''; }
      let after = p.content ?? '';
      if (rtc.tool_name === 'edit') after = p.replace_all ? before.split(p.old_string).join(p.new_string) : before.replace(p.old_string, () => p.new_string);
      const rows = lineDiff(before, String(after));
      return `<div class="muted">${esc(rtc.tool_name)} ${esc(p.path)}</div><div class="diff" part="diff">${rows.map(([k, l]) => `<div class="${k === '+' ? 'add' : k === '-' ? 'del' : ''}">${esc(k + ' ' + l)}</div>`).join('')}</div>`;
    }
    if (rtc.tool_name === 'script') {
      const code = p.action === 'run' ? `run /scripts/${p.name}.js with ${JSON.stringify(p.params || {})}` : p.code || '';
      return `<div class="muted">script: ${esc(p.action || 'eval')}</div><pre part="code"><code>${esc(code)}</code></pre>`;
    }
    return `<pre><code>${esc(JSON.stringify(p, null, 2))}</code></pre>`;
  }

  async render() {
    const id = this.dataset.rtc;
    const prompt = (this.agent.store.state.prompts || {})[id];
    if (!prompt) return;
    this.root.innerHTML = `${await this.preview(prompt.rtc)}
      <div class="row" style="margin-top:6px"><button class="primary" data-act="approve">${esc(t('prompt.approve'))}</button>
      <input class="grow" name="reason" placeholder="${esc(t('prompt.reason'))}" aria-label="${esc(t('prompt.reason'))}"><button class="danger" data-act="reject">${esc(t('prompt.reject'))}</button></div>`;
    this.root.querySelector('[data-act=approve]').onclick = () => prompt.resolve({ approved: true });
    this.root.querySelector('[data-act=reject]').onclick = () => prompt.resolve({ approved: false, reason: this.root.querySelector('[name=reason]').value.trim() });
    // The preview is built asynchronously, after the message list scrolled to its end: bring
    // the buttons into view, or the turn waits on a question the person cannot see.
    this.root.querySelector('[data-act=reject]').scrollIntoView({ block: 'center' });
  }
}

class AskUser extends View {
  static styles = css;

  set agent(agent) { this._agent = agent; this.render(); }
  get agent() { return this._agent; }

  render() {
    const prompt = (this.agent.store.state.prompts || {})[this.dataset.rtc];
    if (!prompt) return;
    const questions = (prompt.rtc.parameters && prompt.rtc.parameters.questions || []).slice(0, 4);
    this.root.innerHTML = questions.map((q, qi) => `<fieldset data-q="${qi}"><legend><b>${esc(q.header || '')}</b> ${esc(q.question)}</legend>
      ${(q.options || []).map((o, oi) => `<label><input type="${q.multiSelect ? 'checkbox' : 'radio'}" name="q${qi}" value="${oi}"> ${esc(o.label)}</label>${o.description ? `<div class="desc">${esc(o.description)}</div>` : ''}`).join('')}
      <label><input type="${q.multiSelect ? 'checkbox' : 'radio'}" name="q${qi}" value="other"> ${esc(t('prompt.other'))} <input name="other${qi}" placeholder="${esc(t('prompt.otherPlaceholder'))}"></label>
      </fieldset>`).join('') + `<button class="primary" data-act="answer">${esc(t('prompt.answer'))}</button>`;
    this.root.querySelector('[data-act=answer]').onclick = () => {
      const answers = questions.map((q, qi) => {
        const picked = [...this.root.querySelectorAll(`input[name=q${qi}]:checked`)].map((i) => i.value);
        const labels = picked.filter((v) => v !== 'other').map((v) => q.options[Number(v)].label);
        const other = this.root.querySelector(`[name=other${qi}]`).value.trim();
        if (picked.includes('other') || (other && !labels.length)) labels.push(other);
        return { question: q.question, answer: labels };
      });
      prompt.resolve({ answers });
    };
  }
}

customElements.define('rtc-approval', Approval);
customElements.define('rtc-ask-user', AskUser);
