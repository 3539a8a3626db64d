#!/usr/bin/env python3
"""Writes the cluster's FlashSale pods as Prometheus file_sd targets, every
few seconds (Debian's Prometheus has no Kubernetes discovery): each running
pod labelled app.kubernetes.io/name=flashsale, at its pod IP (reached through
the bridge), on its metrics, http-metrics or http-internal port.
Usage: pod-targets.py KUBECTL OUT_JSON"""
import json
import os
import subprocess
import sys
import time

PORTS = {"metrics", "http-metrics", "http-internal"}


def targets(pods):
    for pod in pods["items"]:
        meta, status = pod["metadata"], pod.get("status", {})
        if status.get("phase") != "Running" or not status.get("podIP"):
            continue
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []):
                if port.get("name") in PORTS:
                    yield {
                        "targets": [f"{status['podIP']}:{port['containerPort']}"],
                        "labels": {
                            "kubernetes_namespace": meta["namespace"],
                            "pod": meta["name"],
                            "component": meta.get("labels", {}).get(
                                "app.kubernetes.io/component", ""
                            ),
                        },
                    }


def main():
    kubectl, out = sys.argv[1], sys.argv[2]
    while True:
        listed = subprocess.run(
            [kubectl, "--request-timeout=5s", "get", "pods", "--all-namespaces",
             "-l", "app.kubernetes.io/name=flashsale", "-o", "json"],
            capture_output=True, text=True,
        )
        if listed.returncode == 0:
            found = list(targets(json.loads(listed.stdout)))
            with open(out + ".tmp", "w") as f:
                json.dump(found, f)
            os.replace(out + ".tmp", out)
        time.sleep(3)


if __name__ == "__main__":
    main()
