#!/bin/sh
# Vendor the widget's browser libraries (pinned in package-lock.json, from the npm registry)
# into static/rtc-agent/vendor/ with their licences. Repeatable: `npm ci` installs exactly the
# locked versions; the copies are git-ignored and rebuilt by `make vendor`.
set -eu
cd "$(dirname "$0")/.."
OUT=static/rtc-agent/vendor
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
rm -rf "$OUT"
mkdir -p "$OUT/licenses"
cp node_modules/centrifuge/build/index.mjs "$OUT/centrifuge.mjs"
cp node_modules/marked/lib/marked.esm.js "$OUT/marked.esm.js"
cp node_modules/dompurify/dist/purify.es.mjs "$OUT/purify.es.mjs"
cp node_modules/centrifuge/LICENSE "$OUT/licenses/centrifuge-LICENSE"
cp node_modules/marked/LICENSE.md "$OUT/licenses/marked-LICENSE.md" 2>/dev/null || cp node_modules/marked/LICENSE "$OUT/licenses/marked-LICENSE"
cp node_modules/dompurify/LICENSE "$OUT/licenses/dompurify-LICENSE"
node -e 'for (const p of ["centrifuge","marked","dompurify"]) console.log(p, require("./node_modules/" + p + "/package.json").version)' > "$OUT/VERSIONS"
echo "vendored into $OUT:"; cat "$OUT/VERSIONS"
