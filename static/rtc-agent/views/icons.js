// Small inline SVG icons for attachments (drawn here; emoji glyphs are missing from many
// systems' fonts, and inline SVG needs neither a font nor a request).
const svg = (body, size = 18) => `<svg viewBox="0 0 24 24" width="${size}" height="${size}" aria-hidden="true" focusable="false" fill="none" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" stroke-linejoin="round">${body}</svg>`;

export const paperclip = svg('<path transform="rotate(40 12 12)" d="M15 7v9a3 3 0 0 1-6 0V5a2 2 0 0 1 4 0v10"/>');
export const documentIcon = svg('<path d="M6 3h8l4 4v14H6z"/><path d="M14 3v4h4M9 12h6M9 16h6"/>', 20);
export const imageIcon = svg('<rect x="3" y="5" width="18" height="14" rx="2"/><circle cx="9" cy="10" r="1.8"/><path d="M20 17l-5-5-8 7"/>', 20);
