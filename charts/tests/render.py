#!/usr/bin/env python3
"""Lint and render the FerroLB chart with real Helm, offline.

Helm comes from the PyPI package helm-python-sdk, which bundles Helm's Go library (libhelm_c) and
calls it through ctypes: no helm binary, no cluster, no network.

    python3 -m pip install helm-python-sdk==0.2.2
    python3 charts/tests/render.py [-f VALUES.yaml]... [--set-json KEY=JSON]... > rendered.yaml

What it does, in order:
  1. `helm lint --strict` of the chart with the given values (warnings fail too);
  2. `helm template`: prints every rendered manifest as one multi-document YAML stream on stdout,
     ordered by template path, each document preceded by a `# Source:` comment.
     With --notes it prints the rendered NOTES.txt instead.
     With --kube-apiserver URL the chart's `lookup` calls read that API server (nothing is written
     there), and --upgrade renders as an upgrade of an installed release instead of an install.

Exit status: 0 rendered; 1 lint or render failed (Helm's messages on stderr); 2 bad usage;
3 helm-python-sdk is not installed (callers may skip, and say so).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_HELM = 3

CHART_DIR = pathlib.Path(__file__).resolve().parent.parent / "ferrolb"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion); lint checks against it.
KUBE_VERSION = "v1.30.0"
# Helm's lint severities: 1 info, 2 warning, 3 error. --strict fails on warnings.
WARNING = 2


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merge `override` into `base` the way Helm merges -f files: maps recursively, the rest replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-f", "--values", action="append", default=[], type=pathlib.Path,
                        help="values file (repeatable, later files win)")
    parser.add_argument("--set-json", action="append", default=[], metavar="KEY=JSON",
                        help="like helm --set-json (repeatable, applied after the files)")
    parser.add_argument("--namespace", default="ferrolb-system", help="release namespace")
    parser.add_argument("--release", default="ferrolb", help="release name")
    parser.add_argument("--chart", default=CHART_DIR, type=pathlib.Path, help="chart directory")
    parser.add_argument("--notes", action="store_true", help="print the rendered NOTES.txt only")
    parser.add_argument("--kube-apiserver", metavar="URL",
                        help="API server that `lookup` reads (default: none, lookups are empty)")
    parser.add_argument("--upgrade", action="store_true",
                        help="render as an upgrade rather than a first install")
    args = parser.parse_args()

    try:
        import helm_python as helm
    except ImportError as err:
        print(f"helm-python-sdk is not installed ({err}); "
              "install it with: python3 -m pip install helm-python-sdk==0.2.2", file=sys.stderr)
        return EXIT_NO_HELM

    values: dict[str, Any] = {}
    try:
        for path in args.values:
            values = deep_merge(values, helm.values_from_yaml(path.read_text()) or {})
        for expression in args.set_json:
            values = deep_merge(values, helm.parse_set_json(expression))
    except (OSError, helm.HelmError) as err:
        print(f"cannot read values: {err}", file=sys.stderr)
        return EXIT_USAGE

    report = helm.lint(str(args.chart), values, strict=True, namespace=args.namespace,
                       kube_version=KUBE_VERSION)
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= WARNING]
    if problems or report.get("errors"):
        print("helm lint --strict failed:", file=sys.stderr)
        for message in problems:
            print(f"  [{message.get('path')}] {message.get('error', '').strip()}", file=sys.stderr)
        for error in report.get("errors") or []:
            if not any(error.strip() == m.get("error", "").strip() for m in problems):
                print(f"  {error.strip()}", file=sys.stderr)
        return EXIT_FAILED

    mode = {"is_upgrade": True} if args.upgrade else {"is_install": True}
    try:
        with helm.Chart.load(str(args.chart)) as chart:
            if args.kube_apiserver:
                with helm.Config(kube_apiserver=args.kube_apiserver,
                                 namespace=args.namespace) as cluster:
                    manifests = cluster.render(chart, values, name=args.release,
                                               namespace=args.namespace, **mode)
            else:
                manifests = chart.render(values, name=args.release, namespace=args.namespace,
                                         **mode)
    except helm.HelmError as err:
        print(f"helm template failed: {err}", file=sys.stderr)
        return EXIT_FAILED

    if args.notes:
        notes = [text for path, text in manifests.items() if path.endswith("/NOTES.txt")]
        sys.stdout.write("".join(notes))
        return 0

    for path in sorted(manifests):
        text = manifests[path]
        if path.endswith("NOTES.txt") or not text.strip():
            continue
        # Templates that loop start with a separator of their own; one per template is enough.
        body = text.strip().removeprefix("---").lstrip("\n")
        sys.stdout.write(f"---\n# Source: {path}\n{body}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
