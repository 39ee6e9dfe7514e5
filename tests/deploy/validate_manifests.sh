#!/usr/bin/env bash
# deploy/kubernetes checked offline: every manifest against the schemas of a
# pinned Kubernetes version (kubernetes-validate, strict: unknown fields
# fail), then scanned for misconfiguration (checkov). The overlay is rendered
# with `kubectl kustomize` where kubectl exists and checked as rendered; the
# base's files are complete resources and are checked as they are. With a
# ferryd binary, the renderings are then checked for what they must say
# (check_rendered.py: every FERRYD_* variable an option ferryd reads, the
# workers from the CPU limit, the drain, digests, key mode).
# Usage: validate_manifests.sh DEPLOY_VENV [FERRYD]. Exits 77 (skipped) without the tools.
set -uo pipefail
venv=$1
ferryd=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
deploy=$(cd "$here/../../deploy/kubernetes" && pwd)
k8s_version=1.33.0

if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/checkov" ]; then
  echo "SKIPPED: kubernetes-validate and checkov are not installed in $venv (bash scripts/deploy-env.sh installs them)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0

manifests=()
for f in "$deploy"/base/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] || manifests+=("$f")
done
manifests+=("$deploy/overlays/example/namespace.yaml")
rendered=()
if command -v kubectl >/dev/null 2>&1; then
  kubectl kustomize "$deploy/base" > "$work/base.yaml" || { echo "FAILED: kubectl kustomize $deploy/base"; status=1; }
  for overlay in "$deploy"/overlays/*/; do
    name=$(basename "$overlay")
    if kubectl kustomize "$overlay" > "$work/overlay-$name.yaml"; then
      manifests+=("$work/overlay-$name.yaml")
      rendered+=("$name=$work/overlay-$name.yaml")
    else
      echo "FAILED: kubectl kustomize $overlay"; status=1
    fi
  done
else
  echo "note: no kubectl here, so the overlays are not rendered; the base is checked as it is"
fi

echo "== kubernetes-validate, Kubernetes $k8s_version, strict"
"$venv/bin/kubernetes-validate" -k "$k8s_version" --strict --quiet "${manifests[@]}" || status=1

if [ -n "$ferryd" ] && [ -s "$work/base.yaml" ]; then
  echo "== what the renderings must say (check_rendered.py)"
  "$venv/bin/python" "$here/check_rendered.py" "$ferryd" "$work/base.yaml" "${rendered[@]}" || status=1
fi

echo "== checkov (offline)"
# --skip-download and BC_SKIP_MAPPING keep checkov from calling its vendor's API.
export BC_SKIP_MAPPING=TRUE
checkov=("$venv/bin/checkov" --framework kubernetes --compact --quiet --skip-download)
"${checkov[@]}" -d "$deploy/base" || status=1
for f in "$work"/overlay-*.yaml; do
  [ -e "$f" ] && { "${checkov[@]}" -f "$f" || status=1; }
done

[ $status -eq 0 ] && echo "deploy/kubernetes: every manifest validates and passes checkov"
exit $status
