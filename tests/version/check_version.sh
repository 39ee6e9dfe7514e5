#!/usr/bin/env bash
# One version everywhere: the CMake project's (CMakeLists.txt,
# project(ferry VERSION x.y.z)) must be what the binaries say, what the Python
# package reads, what the image is tagged and labelled, and what the docs quote.
#   check_version.sh SOURCE_DIR [FERRY_BINARY FERRYD_BINARY]
set -euo pipefail
src=${1:?usage: check_version.sh SOURCE_DIR [FERRY_BINARY FERRYD_BINARY]}
ferry=${2:-}
ferryd=${3:-}
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

version=$(sed -nE 's/^project\(ferry VERSION ([0-9]+\.[0-9]+\.[0-9]+).*/\1/p' "$src/CMakeLists.txt")
[[ -n $version ]] || { echo "FAIL: $src/CMakeLists.txt has no 'project(ferry VERSION x.y.z' line" >&2; exit 1; }
echo "CMake project version: $version"

# The Python package takes its version from CMakeLists.txt through
# scikit-build-core's regex provider; the regex must find this version.
pyproject=$src/pyproject.toml
grep -qE '^dynamic = \[.*"version".*\]' "$pyproject" || fail "$pyproject: [project] does not declare the version dynamic"
grep -qE '^version *=' "$pyproject" && fail "$pyproject: a literal version ($(grep -E '^version *=' "$pyproject")); take the CMake one"
python3 - "$src" "$version" <<'PY' || failures=$((failures + 1))
import pathlib, re, sys, tomllib
src, version = pathlib.Path(sys.argv[1]), sys.argv[2]
meta = tomllib.loads((src / "pyproject.toml").read_text()).get("tool", {}).get("scikit-build", {})
meta = meta.get("metadata", {}).get("version", {})
if meta.get("provider") != "scikit_build_core.metadata.regex":
    sys.exit(f"FAIL: pyproject.toml: metadata.version.provider is {meta.get('provider')!r}, not the regex provider")
m = re.search(meta["regex"], (src / meta["input"]).read_text(), re.MULTILINE)
found = m.group("value") if m else None
if found != version:
    sys.exit(f"FAIL: pyproject.toml: the version regex reads {found!r} from {meta['input']}, not {version!r}")
print(f"pyproject.toml: reads {found} from {meta['input']}")
PY

# Every version quoted for ferry, ferryd or the image in deploy/, docs/ and
# README.md: "ferryd 1.2.3", "ferry 1.2.3", "ferryd:1.2.3", "newTag: 1.2.3",
# "image.version=\"1.2.3\"".
pattern='(ferryd?[ :]v?|newTag: *|image\.version=")[0-9]+\.[0-9]+\.[0-9]+'
found=0
while IFS= read -r hit; do
  found=$((found + 1))
  quoted=$(grep -oE "$pattern" <<<"${hit#*:*:}" | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | sort -u)
  for q in $quoted; do [[ $q == "$version" ]] || fail "${hit%%:*}: quotes $q, not $version: ${hit#*:}"; done
done < <(cd "$src" && grep -rnEI "$pattern" deploy docs README.md || true)
echo "deploy/, docs/, README.md: $found lines quote a version"
for f in deploy/docker/Dockerfile deploy/kubernetes/base/statefulset.yaml deploy/kubernetes/overlays/example/kustomization.yaml; do
  grep -qF "$version" "$src/$f" || fail "$f: does not carry $version"
done

# The binaries: config::version, generated from the same project() line.
for bin in "$ferry" "$ferryd"; do
  [[ -n $bin ]] || continue
  said=$("$bin" --version 2>&1) || fail "$bin --version: exit status $?"
  [[ $said == *"$version"* ]] || fail "$bin --version says '$said', not $version"
  echo "$(basename "$bin") --version: $said"
done

if ((failures)); then
  echo "$failures place(s) do not carry the CMake version $version" >&2
  exit 1
fi
echo "every place carries $version"
