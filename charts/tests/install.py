#!/usr/bin/env python3
"""Install the FerroLB chart on a cluster with real Helm (`helm install`, no helm binary).

Helm comes from the PyPI package helm-python-sdk, which bundles Helm's Go library (libhelm_c);
the same Helm that charts/tests/render.py lints and renders with.

    python3 charts/tests/install.py --kubeconfig FILE [--namespace NS] [--release NAME]
        [--set-json KEY=JSON]... [--timeout SECONDS]

Installs charts/ferrolb as release NAME (default ferrolb) in NS (default ferrolb-system, created
when missing) and waits until its Deployment and DaemonSet are ready (Helm's watcher), then
prints the release's name, revision and status. Exit status: 0 installed and ready; 1 Helm
refused or timed out (Helm's message on stderr); 3 helm-python-sdk is not installed.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

CHART_DIR = pathlib.Path(__file__).resolve().parent.parent / "ferrolb"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="ferrolb-system")
    parser.add_argument("--release", default="ferrolb")
    parser.add_argument("--set-json", action="append", default=[], metavar="KEY=JSON")
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument("--no-wait", action="store_true", help="return once the objects are created")
    args = parser.parse_args()
    try:
        import helm_python as helm
    except ImportError as err:
        print(f"helm-python-sdk is not installed ({err}); python3 -m pip install helm-python-sdk==0.2.2",
              file=sys.stderr)
        return 3
    values: dict = {}
    try:
        for expression in args.set_json:
            values = merge(values, helm.parse_set_json(expression))
        with helm.Chart.load(str(CHART_DIR)) as chart, \
                helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as config:
            release = config.install(chart, args.release, values, namespace=args.namespace,
                                     create_namespace=True, wait=None if args.no_wait else "watcher",
                                     timeout=args.timeout)
    except helm.HelmError as err:
        print(f"helm install: {err}", file=sys.stderr)
        return 1
    info = release.get("info", {}) if isinstance(release, dict) else {}
    print(f"{args.release}: revision {release.get('version') if isinstance(release, dict) else '?'}, "
          f"{info.get('status', 'deployed')}")
    return 0


def merge(base: dict, override: dict) -> dict:
    """Merge `override` into `base` the way Helm merges values: maps recursively, the rest replaced."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


if __name__ == "__main__":
    sys.exit(main())
