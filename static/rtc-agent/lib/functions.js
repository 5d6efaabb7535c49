// The page's own functions, offered to the agent (issue 13; the original's function
// registration). Three ways in, one shape out:
// * declarative: the element's `agentConfig = {name, description, persona, groups: [{name,
//   description, functions: [{name, description, parameters, returns, class, handler, hooks}]}]}`;
// * imperative: `defineRegistry({...})` -> registry; `registry.createGroup({name, description})`
//   -> group; `group.register({...})`; then `element.registry = registry`;
// * `rtcAgent.registerFunction({name, ...})` (one function without a group, on every widget
//   of the page: what rtcagent had before).
// A function's path is `group.function` (or just its name without a group). The model gets it
// as a tool named `group__function` (tool names allow no dot) and, inside scripts, as
// `rtcAgent.callFunction('group.function', args)` or `rtcAgent.group.function(args)`.
// `parameters` is a JSON Schema (or the original's legacy list `[{name, schema, required,
// description}]`): the arguments are validated in the browser (@cfworker/json-schema: no eval,
// fine under a strict CSP) before the handler runs; a refusal is the call's error, which the
// model reads as "[Tool Error] invalid arguments for order.create: …". `class` (read, write,
// script) picks when the user must approve a call (docs/protocol.md §6).
import { Validator } from '../vendor/json-schema/index.js';

export const CLASSES = ['read', 'write', 'script'];
const NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,30}$/; // in a group: `a__b` stays within 64
const LONE_NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/;
const EMPTY = { type: 'object', properties: {} };

export const wireName = (path) => path.replace('.', '__');

// The original's legacy OpenAPI-style list as one JSON Schema object.
function schemaOf(parameters) {
  if (parameters === undefined || parameters === null) return EMPTY;
  if (Array.isArray(parameters)) {
    const schema = { type: 'object', properties: {}, required: [] };
    for (const p of parameters) {
      if (!p || !NAME.test(p.name || '')) throw new Error('a parameter needs a name');
      schema.properties[p.name] = { ...(p.schema || {}), ...(p.description ? { description: p.description } : {}) };
      if (p.required) schema.required.push(p.name);
    }
    if (!schema.required.length) delete schema.required;
    return schema;
  }
  if (typeof parameters !== 'object') throw new Error('parameters must be a JSON Schema object');
  return parameters;
}

// Leaf errors only ("Property x does not match schema" repeats what its child says).
const SKIP = new Set(['properties', 'items', 'prefixItems', 'allOf', '$ref', 'false', 'additionalItems']);
export function validationMessage(errors) {
  const lines = errors.filter((e) => !SKIP.has(e.keyword))
    .map((e) => `${e.instanceLocation.replace(/^#/, '') || 'arguments'}: ${e.error}`);
  return [...new Set(lines)].slice(0, 8).join('; ');
}

export class ValidationError extends Error {
  constructor(path, errors) {
    super(`invalid arguments for ${path}: ${validationMessage(errors)}`);
    this.name = 'ValidationError';
    this.errors = errors;
  }
}

function makeDef(def, group) {
  if (!def || typeof def !== 'object') throw new Error('registerFunction: a definition object is needed');
  const { name, description = '', handler, hooks = {}, returns = null } = def;
  if (!(group ? NAME : LONE_NAME).test(name || '')) {
    throw new Error(`registerFunction: invalid name ${JSON.stringify(name)} (letters, digits, _ and -; at most ${group ? 31 : 64})`);
  }
  if (String(name).includes('__') || (group && group.includes('__'))) throw new Error('registerFunction: names may not contain "__"');
  if (typeof handler !== 'function') throw new Error(`registerFunction: ${name}: handler must be a function`);
  const klass = def.class ?? def.approval ?? 'script';
  if (!CLASSES.includes(klass)) throw new Error(`registerFunction: ${name}: class must be one of ${CLASSES.join(', ')}`);
  const parameters = schemaOf(def.parameters ?? def.schema);
  let validator;
  try { validator = new Validator(parameters, '2020-12', false); } catch (err) {
    throw new Error(`registerFunction: ${name}: the parameters schema is not usable: ${err.message}`);
  }
  const path = group ? `${group}.${name}` : name;
  return { path, tool: wireName(path), group: group || '', name, description: String(description), parameters,
    returns, class: klass, handler, hooks: hooks || {}, validator };
}

export class Registry {
  constructor({ name = '', description = '', persona = '' } = {}) {
    Object.assign(this, { name, description, persona });
    this.groups = new Map(); // name -> {name, description}
    this.fns = new Map(); // path -> definition
    this.listeners = new Set();
  }

  createGroup({ name, description = '' } = {}) {
    if (!NAME.test(name || '')) throw new Error(`createGroup: invalid group name ${JSON.stringify(name)}`);
    this.groups.set(name, { name, description });
    this.changed();
    const registry = this;
    return {
      name, description,
      register(def) { return registry.register(def, name); },
      unregister(fn) { return registry.unregister(`${name}.${fn}`); },
    };
  }

  // -> the function's path. Registering a path again replaces it.
  register(def, group = def && def.group) {
    if (group && !this.groups.has(group)) this.groups.set(group, { name: group, description: '' });
    const fn = makeDef(def, group);
    this.fns.set(fn.path, fn);
    this.changed();
    return fn.path;
  }

  unregister(path) { const had = this.fns.delete(path); if (had) this.changed(); return had; }
  clear() { this.fns.clear(); this.groups.clear(); this.changed(); }
  list() { return [...this.fns.values()]; }
  onChange(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  changed() { for (const fn of [...this.listeners]) fn(this); }
}

export function defineRegistry(options = {}) { return new Registry(options); }

// agentConfig -> a registry (throws naming the first bad function).
export function registryFromConfig(config) {
  const registry = new Registry({ name: config.name || '', description: config.description || '', persona: config.persona || '' });
  for (const group of config.groups || []) {
    const g = registry.createGroup({ name: group.name, description: group.description || '' });
    for (const fn of group.functions || []) g.register(fn);
  }
  for (const fn of config.functions || []) registry.register(fn, '');
  return registry;
}

// The page-wide registry of rtcAgent.registerFunction (every widget of the page sees it).
export const pageRegistry = new Registry();
export function registerFunction(def) { return pageRegistry.register(def, ''); }
// Kept for code that reads the old map directly (path -> definition).
export const functions = pageRegistry.fns;

// Run one function: validate, hooks and events around the handler. `emit(name, detail)` gets
// toolCallStart / toolCallProgress / toolCallSuccess / toolCallError.
export async function invoke(fn, params, { emit = () => {}, log = null } = {}) {
  const args = params === undefined || params === null ? {} : params;
  const note = (level, text) => { if (log) log.push({ level, text, at: Date.now() }); };
  const result = fn.validator.validate(args);
  if (!result.valid) {
    const err = new ValidationError(fn.path, result.errors);
    note('error', err.message);
    emit('toolCallError', { path: fn.path, error: err.message, params: args });
    throw err;
  }
  const hook = (name, value) => {
    const h = fn.hooks && fn.hooks[name];
    if (typeof h !== 'function') return;
    try { Promise.resolve(h(value)).catch((e) => console.error(`rtc-agent: ${fn.path} hooks.${name}`, e)); }
    catch (e) { if (name === 'onStart') throw e; console.error(`rtc-agent: ${fn.path} hooks.${name}`, e); }
  };
  const onProgress = (progress) => {
    note('info', `progress ${typeof progress === 'number' ? progress : JSON.stringify(progress)}`);
    hook('onProgress', progress);
    emit('toolCallProgress', { path: fn.path, progress });
  };
  try {
    hook('onStart', args); // may throw to cancel the call
    emit('toolCallStart', { path: fn.path, params: args });
    note('info', `call ${fn.path}(${JSON.stringify(args)})`);
    const value = await fn.handler(args, onProgress, { path: fn.path, log: (text) => note('info', String(text)) });
    const out = value === undefined ? null : value;
    hook('onSuccess', out);
    emit('toolCallSuccess', { path: fn.path, result: out });
    return out;
  } catch (err) {
    const message = String((err && err.message) || err);
    note('error', message);
    hook('onError', err instanceof Error ? err : new Error(message));
    emit('toolCallError', { path: fn.path, error: message, params: args });
    throw err instanceof Error ? err : new Error(message);
  }
}

// Example arguments for a schema (the debugger's starting point): examples, defaults, then a
// placeholder of the right type for each required property.
export function exampleFor(schema, depth = 0) {
  if (!schema || typeof schema !== 'object' || depth > 4) return null;
  if (Array.isArray(schema.examples) && schema.examples.length) return schema.examples[0];
  if ('example' in schema) return schema.example;
  if ('default' in schema) return schema.default;
  if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum[0];
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  if (type === 'object' || schema.properties) {
    const out = {};
    for (const [key, sub] of Object.entries(schema.properties || {})) out[key] = exampleFor(sub, depth + 1);
    return out;
  }
  if (type === 'array') return schema.items ? [exampleFor(schema.items, depth + 1)] : [];
  if (type === 'string') return '';
  if (type === 'integer' || type === 'number') return typeof schema.minimum === 'number' ? schema.minimum : 0;
  if (type === 'boolean') return false;
  return null;
}

// The documentation the agent reads in the VFS: /functions/<group>/<name>.md (or
// /functions/<name>.md without a group) and /functions/INDEX.md.
export function docPath(fn) { return fn.group ? `/functions/${fn.group}/${fn.name}.md` : `/functions/${fn.name}.md`; }

export function functionDoc(fn) {
  const call = JSON.stringify(fn.path);
  const lines = [`# ${fn.path}`, '', fn.description || '(no description)', '', `Class: ${fn.class}`, '',
    `Tool: \`${fn.tool}\`. From a script: \`await rtcAgent.callFunction(${call}, {...})\`` +
      (fn.group ? ` or \`await rtcAgent.${fn.group}.${fn.name}({...})\`` : ''),
    '', 'Parameters (JSON Schema):', '', '```json', JSON.stringify(fn.parameters, null, 2), '```', ''];
  if (fn.returns) {
    lines.push('Returns:', '');
    if (fn.returns.description) lines.push(fn.returns.description, '');
    if (fn.returns.schema) lines.push('```json', JSON.stringify(fn.returns.schema, null, 2), '```', '');
  }
  return lines.join('\n');
}

export function indexDoc(fns, groups = new Map()) {
  const lines = ['# Functions of this page', '', 'Call them as tools, or from a script with `rtcAgent.callFunction(path, args)`.', ''];
  const byGroup = new Map();
  for (const fn of fns) {
    if (!byGroup.has(fn.group)) byGroup.set(fn.group, []);
    byGroup.get(fn.group).push(fn);
  }
  for (const [group, list] of byGroup) {
    lines.push(group ? `## ${group}${groups.get(group)?.description ? `: ${groups.get(group).description}` : ''}` : '## (no group)', '');
    for (const fn of list) lines.push(`- \`${fn.path}\` (${fn.class}): ${fn.description.split('\n')[0]} (${docPath(fn)})`);
    lines.push('');
  }
  return lines.join('\n');
}
