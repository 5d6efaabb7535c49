// Minimal promise wrapper over IndexedDB: one database per server and user, four stores.
// kv: snapshot + recovery position; files: the VFS; outbox: undelivered results; runs: started tools.
const STORES = { kv: null, files: { keyPath: 'path' }, outbox: { keyPath: 'rtc_id' }, runs: { keyPath: 'rtc_id' } };

const done = (req) => new Promise((resolve, reject) => {
  req.onsuccess = () => resolve(req.result);
  req.onerror = () => reject(req.error);
});

export class Db {
  constructor(db) { this.db = db; }

  static open(name) {
    const req = indexedDB.open(name, 1);
    req.onupgradeneeded = () => {
      for (const [store, opts] of Object.entries(STORES)) {
        if (!req.result.objectStoreNames.contains(store)) req.result.createObjectStore(store, opts || undefined);
      }
    };
    return done(req).then((db) => new Db(db));
  }

  _store(name, mode) { return this.db.transaction(name, mode).objectStore(name); }
  get(store, key) { return done(this._store(store, 'readonly').get(key)); }
  all(store) { return done(this._store(store, 'readonly').getAll()); }
  put(store, value, key) { return done(this._store(store, 'readwrite').put(value, key)); }
  del(store, key) { return done(this._store(store, 'readwrite').delete(key)); }

  // Several writes in one transaction (all or nothing): ops = [[store, value, key?], ...].
  putMany(ops) {
    const names = [...new Set(ops.map((o) => o[0]))];
    const tx = this.db.transaction(names, 'readwrite');
    for (const [store, value, key] of ops) tx.objectStore(store).put(value, key);
    return new Promise((resolve, reject) => {
      tx.oncomplete = () => resolve();
      tx.onerror = tx.onabort = () => reject(tx.error);
    });
  }

  close() { this.db.close(); }
}
