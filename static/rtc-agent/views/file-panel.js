// <rtc-file-panel>: browse the virtual file system, open a file, download it, or attach it to
// the next message (it joins the composer's upload queue like a picked file).
import { View, esc } from './base.js';
import { t } from '../lib/i18n.js';
import { guessTextType } from '../lib/filetypes.js';

class FilePanel extends View {
  static styles = View.css(`
    :host { display: flex; flex-direction: column; min-height: 0; border-left: 1px solid var(--rtc-color-border, #e3e6ee); background: var(--rtc-color-surface-2, #fafbfd); }
    ul { list-style: none; margin: 0; padding: 6px; overflow: auto; max-height: 40%; }
    li { padding: 2px 4px; border-radius: 4px; cursor: pointer; font-family: ui-monospace, monospace; font-size: 12px; }
    li[aria-selected="true"] { background: var(--rtc-color-selected, #e6ecfb); }
    .view { flex: 1; overflow: auto; padding: 6px; border-top: 1px solid var(--rtc-color-border, #e3e6ee); }
    pre { margin: 0; white-space: pre-wrap; }
  `);

  constructor() {
    super();
    this.selected = null;
    this.root.addEventListener('click', (e) => {
      const li = e.target.closest('li');
      if (li) { this.selected = li.dataset.path; this.update(this.agent.store.state); }
      if (e.target.closest('[data-act=download]')) this.download();
      if (e.target.closest('[data-act=attach]')) this.attach();
    });
    // The keyboard opens a file like a click (Enter or Space on the focused entry).
    this.root.addEventListener('keydown', (e) => {
      const li = e.target.closest && e.target.closest('li[data-path]');
      if (!li || (e.key !== 'Enter' && e.key !== ' ')) return;
      e.preventDefault();
      const path = li.dataset.path;
      li.click();
      this.root.querySelector(`li[data-path="${CSS.escape(path)}"]`)?.focus();
    });
  }

  update(state) {
    const files = state.files || [];
    // Only the listing and the selection matter here, not every store change (upload progress).
    if (this._shown && this._shown.files === files && this._shown.selected === this.selected) return;
    this._shown = { files, selected: this.selected };
    const file = files.find((f) => f.path === this.selected);
    this.root.innerHTML = `<div class="row" style="padding:6px"><b class="grow">${esc(t('files.title'))}</b><span class="muted">${files.length}</span></div>
      <ul part="files" role="listbox" aria-label="${esc(t('files.title'))}">${files.map((f) => `<li role="option" tabindex="0" data-path="${esc(f.path)}" aria-selected="${f.path === this.selected}">${esc(f.path)} <span class="muted">${f.size} B</span></li>`).join('') || `<li class="muted">${esc(t('files.none'))}</li>`}</ul>
      <div class="view">${file ? `<div class="row"><b class="grow">${esc(file.path)}</b><button data-act="attach" aria-label="${esc(t('files.attachLabel', { path: file.path }))}">${esc(t('files.attach'))}</button><button data-act="download">${esc(t('files.download'))}</button></div><pre part="file-content">${esc(file.content)}</pre>` : `<span class="muted">${esc(t('files.pick'))}</span>`}</div>`;
  }

  attach() {
    const file = (this.agent.store.state.files || []).find((f) => f.path === this.selected);
    if (!file) return;
    const name = file.path.split('/').pop() || 'file.txt';
    this.agent.uploads.add([new File([file.content], name, { type: guessTextType(name) })]);
  }

  download() {
    const file = (this.agent.store.state.files || []).find((f) => f.path === this.selected);
    if (!file) return;
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([file.content], { type: 'text/plain' }));
    a.download = file.path.split('/').pop() || 'file.txt';
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }
}

customElements.define('rtc-file-panel', FilePanel);
