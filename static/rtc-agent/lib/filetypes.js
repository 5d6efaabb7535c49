// Which files the widget lets the user attach: what the server's attachment pipeline turns into
// something the model sees (docs/attachments.md). Images (JPEG, PNG, BMP, TIFF, SVG, WebP, GIF)
// become image parts and text-like files are inlined; the server would skip anything else with a
// warning, so the widget refuses it before uploading and says why. The server decides images by
// their bytes; here the type the browser reports and the name's extension are all we have.

const IMAGE_TYPES = {
  'image/jpeg': 'jpg', 'image/pjpeg': 'jpg', 'image/png': 'png', 'image/bmp': 'bmp', 'image/x-ms-bmp': 'bmp',
  'image/tiff': 'tiff', 'image/svg+xml': 'svg', 'image/webp': 'webp', 'image/gif': 'gif',
};
const IMAGE_EXTS = {
  jpg: 'image/jpeg', jpeg: 'image/jpeg', jpe: 'image/jpeg', png: 'image/png', bmp: 'image/bmp',
  tif: 'image/tiff', tiff: 'image/tiff', svg: 'image/svg+xml', webp: 'image/webp', gif: 'image/gif',
};

// Text by extension, with the type sent when the browser reports none or a wrong one (Chromium
// calls `.ts` video/mp2t and `.rs` an XML format).
const TEXT_EXTS = {
  txt: 'text/plain', text: 'text/plain', log: 'text/plain', md: 'text/markdown', markdown: 'text/markdown',
  csv: 'text/csv', tsv: 'text/tab-separated-values', json: 'application/json', jsonl: 'application/jsonl',
  ndjson: 'application/x-ndjson', xml: 'application/xml', yaml: 'application/yaml', yml: 'application/yaml',
  toml: 'application/toml', ini: 'text/plain', cfg: 'text/plain', conf: 'text/plain', env: 'text/plain',
  properties: 'text/plain', html: 'text/html', htm: 'text/html', css: 'text/css', scss: 'text/x-scss',
  less: 'text/x-less', js: 'text/javascript', mjs: 'text/javascript', cjs: 'text/javascript',
  jsx: 'text/javascript', ts: 'text/x-typescript', tsx: 'text/x-typescript', py: 'text/x-python',
  rb: 'text/x-ruby', go: 'text/x-go', rs: 'text/x-rust', java: 'text/x-java', kt: 'text/x-kotlin',
  kts: 'text/x-kotlin', scala: 'text/x-scala', swift: 'text/x-swift', c: 'text/x-c', h: 'text/x-c',
  cc: 'text/x-c++', cpp: 'text/x-c++', hpp: 'text/x-c++', cs: 'text/x-csharp', php: 'text/x-php',
  pl: 'text/x-perl', lua: 'text/x-lua', r: 'text/x-r', dart: 'text/x-dart', sh: 'text/x-shellscript',
  bash: 'text/x-shellscript', zsh: 'text/x-shellscript', ps1: 'text/plain', sql: 'application/sql',
  graphql: 'text/plain', proto: 'text/plain', gradle: 'text/plain', vue: 'text/plain', svelte: 'text/plain',
  tex: 'text/x-tex', rst: 'text/x-rst', adoc: 'text/plain', diff: 'text/x-diff', patch: 'text/x-diff',
  dockerfile: 'text/plain', makefile: 'text/plain',
};
const TEXT_TYPES = new Set([
  'application/json', 'application/xml', 'application/yaml', 'application/x-yaml', 'application/toml',
  'application/javascript', 'application/x-javascript', 'application/ecmascript', 'application/typescript',
  'application/x-sh', 'application/sql', 'application/x-python', 'application/jsonl', 'application/x-ndjson',
]);

// Families the server skips, named so the message says what the file is.
const REFUSED = [
  [/^application\/pdf$/, ['pdf'], 'PDF documents'],
  [/zip|x-7z|x-rar|x-tar|gzip|x-bzip|x-xz|compressed/, ['zip', '7z', 'rar', 'tar', 'gz', 'tgz', 'bz2', 'xz'], 'archives'],
  [/msword|ms-excel|ms-powerpoint|officedocument|opendocument|rtf/, ['doc', 'docx', 'xls', 'xlsx', 'ppt', 'pptx', 'odt', 'ods', 'odp', 'rtf', 'pages', 'numbers', 'key'], 'office documents'],
  [/^audio\//, ['mp3', 'wav', 'ogg', 'flac', 'm4a', 'aac'], 'audio'],
  [/^video\//, ['mp4', 'mov', 'avi', 'mkv', 'webm'], 'video'],
  [/^image\//, ['heic', 'heif', 'avif', 'psd', 'eps', 'ico', 'raw', 'cr2', 'nef', 'jxl'], 'images of this format'],
  [/x-msdownload|x-executable|x-mach|x-sharedlib/, ['exe', 'dll', 'so', 'dylib', 'bin', 'dmg', 'iso', 'apk'], 'programs and disk images'],
];

export const ACCEPTED_HINT = 'images (JPEG, PNG, BMP, TIFF, SVG, WebP, GIF) and text files (plain text, Markdown, CSV, JSON, XML, YAML, source code)';

export function extension(name) {
  const base = String(name || '').split('/').pop().toLowerCase();
  if (base === 'dockerfile' || base === 'makefile') return base;
  const dot = base.lastIndexOf('.');
  return dot > 0 ? base.slice(dot + 1) : '';
}

// {kind: 'image'|'text', mimetype} for a file the model can see, else {reason} in words.
export function classify({ name, type }) {
  const ext = extension(name);
  const claimed = String(type || '').toLowerCase().split(';')[0].trim();
  if (IMAGE_TYPES[claimed]) return { kind: 'image', mimetype: claimed };
  if (IMAGE_EXTS[ext] && (!claimed || claimed === 'application/octet-stream')) return { kind: 'image', mimetype: IMAGE_EXTS[ext] };
  for (const [typeRe, exts, what] of REFUSED) {
    if (exts.includes(ext) || (claimed && typeRe.test(claimed) && !TEXT_EXTS[ext])) {
      const label = claimed && claimed !== 'application/octet-stream' ? claimed : `.${ext}`;
      return { reason: `${what} (${label}) cannot be attached: the model reads ${ACCEPTED_HINT} only` };
    }
  }
  if (TEXT_EXTS[ext]) {
    const textual = claimed.startsWith('text/') || TEXT_TYPES.has(claimed);
    return { kind: 'text', mimetype: textual ? claimed : TEXT_EXTS[ext] };
  }
  if (claimed.startsWith('text/') || TEXT_TYPES.has(claimed) || /\+(json|xml)$/.test(claimed)) {
    return { kind: 'text', mimetype: claimed };
  }
  const label = claimed && claimed !== 'application/octet-stream' ? claimed : ext ? `.${ext} files` : 'files without a known type';
  return { reason: `${label} cannot be attached: the model reads ${ACCEPTED_HINT} only` };
}

// The extension a key gets: the file's own when it is a plain one, else the type's usual one.
export function keyExtension(name, mimetype) {
  const ext = extension(name);
  if (/^[a-z0-9]{1,10}$/.test(ext)) return ext;
  return IMAGE_TYPES[mimetype] || 'txt';
}

// A type for a VFS file (it holds text): by its extension, else plain text.
export function guessTextType(name) {
  const ext = extension(name);
  return IMAGE_EXTS[ext] === 'image/svg+xml' ? 'image/svg+xml' : TEXT_EXTS[ext] || 'text/plain';
}

export function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(bytes < 10240 ? 1 : 0)} KB`;
  if (bytes < 1024 ** 3) return `${(bytes / 1024 ** 2).toFixed(bytes < 10 * 1024 ** 2 ? 1 : 0)} MB`;
  return `${(bytes / 1024 ** 3).toFixed(1)} GB`;
}
