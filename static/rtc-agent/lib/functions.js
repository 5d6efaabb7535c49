// Host functions registered by the page (`rtcAgent.registerFunction`). They run for RTCs of the
// same name and for `rtcAgent.callFunction` inside scripts; each is documented for the model
// as /functions/<name>.md in the VFS (written when an agent starts).
export const functions = new Map();
const CLASSES = ['read', 'write', 'script'];

export function registerFunction({ name, description = '', parameters = { type: 'object', properties: {} }, class: klass = 'script', handler }) {
  if (!/^[A-Za-z_][\w-]{0,63}$/.test(name || '')) throw new Error('registerFunction: invalid name');
  if (typeof handler !== 'function') throw new Error('registerFunction: handler must be a function');
  if (!CLASSES.includes(klass)) throw new Error(`registerFunction: class must be one of ${CLASSES.join(', ')}`);
  functions.set(name, { name, description, parameters, class: klass, handler });
}

export function functionDoc(fn) {
  return `# ${fn.name}\n\n${fn.description}\n\nClass: ${fn.class}\n\nCall it from a script: \`await rtcAgent.callFunction(${JSON.stringify(fn.name)}, {...})\`\n\nParameters (JSON Schema):\n\n\`\`\`json\n${JSON.stringify(fn.parameters, null, 2)}\n\`\`\`\n`;
}
