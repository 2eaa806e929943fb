"""A local Ray cluster scaled by Ray's real autoscaler (v1) through its fake multi-node
provider: worker "nodes" are extra raylets on this machine, launched and terminated by the
autoscaler's monitor process as `request_resources` / pending demand asks.

Why not `ray.cluster_utils.AutoscalingCluster`: in the Ray 2.60 wheel it reads
`ray/autoscaler/_private/fake_multi_node/example.yaml`, which the wheel does not ship, and
its start and shutdown run `ray stop --force`, which kills every Ray process on the machine.

    with FakeAutoscalingCluster(
        head_resources={"CPU": 2},
        worker_node_types={"gpu4": {"resources": {"CPU": 4, "GPU": 4},
                                    "min_workers": 0, "max_workers": 2}},
    ) as cluster:
        ray.init(address=cluster.address)   # the driver needs RAY_AUTH_MODE=disabled
        ...

How it is isolated from other Ray clusters on the machine:
- `ray start --head` runs in a new session (setsid) with a private `--temp-dir`, so its
  `ray_current_cluster` file, session dir, sockets and logs are its own (the fake nodes the
  monitor launches inherit the head's temp dir); free ports for GCS, Ray client server,
  dashboard and autoscaler metrics.
- `shutdown()` kills only the processes of that session (all of them stay in it: GCS, raylets,
  monitor, agents, workers, fake nodes), plus anything whose command line names the private temp
  dir or whose environment carries this cluster's marker, plus their descendants. Never
  `ray stop`.

Token auth: Ray 2.60 enables token authentication for `ray start`; this cluster runs with
`RAY_AUTH_MODE=disabled` (head, and thus the fake nodes and workers it spawns). A driver
must also run with `RAY_AUTH_MODE=disabled` in its environment (see DRIVER_ENV) before it
calls `ray.init(address=cluster.address)`.

Traps handled here (Ray 2.60):
- The fake provider gives each node `RAY_NODE_TYPE_NAME` only in the raylet's env_vars, but the
  node's labels are resolved in the launching (monitor) process, so the
  `ray.io/node-group` label never appears. Each worker type therefore gets
  `labels: {"ray.io/node-group": <type name>}` in the config, which the autoscaler passes on.
- The fake provider connects new nodes to `<node ip>:6379` unless the provider config has
  `gcs_address`; it is set to this head's address.
- The provider launches one node per launch request (whatever the count) unless
  `launch_multiple` is set; it is.
- Autoscaler v1 reads the config file as written (no defaults merged), so the missing
  example.yaml does not matter as long as the config is complete (it is: every key the v1
  autoscaler reads is written here). Autoscaler v2 merges the provider's defaults
  (`providers._get_default_config` -> the missing example.yaml) and its monitor crashes, so v2
  is switched off explicitly (`RAY_enable_autoscaler_v2=0`) and `start()` checks that the v1
  monitor is the one running.
- `--include-dashboard=false` still starts a minimal dashboard process on port 8265 with
  `--port-retries=0`; it gets a free `--dashboard-port`.

It runs under raygang in tests/e2e/test_scaling.py's autoscaler scenario, which checks it too.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import ray
import yaml

import psutil  # shipped in ray/thirdparty_files, on sys.path once ray is imported
from raygang.runtime.ports import free_port

NODE_GROUP_LABEL = "ray.io/node-group"
HEAD_NODE_TYPE = "ray.head.default"  # the fake provider's name for the head's type
DRIVER_ENV = {"RAY_AUTH_MODE": "disabled"}
_MARKER_ENV = "RAYGANG_FAKE_AUTOSCALER_ID"
ALL_INTERFACES = ""  # Ray's daemons listen on every interface

# Keys the v1 autoscaler reads from the config; the fake provider ignores their contents.
_NOT_USED_BY_FAKE_PROVIDER = {
    "auth": {},
    "docker": {},
    "initialization_commands": [],
    "setup_commands": [],
    "head_setup_commands": [],
    "worker_setup_commands": [],
    "head_start_ray_commands": [],
    "worker_start_ray_commands": [],
    "file_mounts": {},
    "cluster_synced_files": [],
    "file_mounts_sync_continuously": False,
    "rsync_exclude": [],
    "rsync_filter": [],
}


class FakeAutoscalingCluster:
    """A head started by `RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=...`; its
    autoscaler (v1 monitor) launches and removes fake worker nodes of the given types."""

    def __init__(self, head_resources: dict, worker_node_types: dict,
                 idle_timeout_minutes: float = 0.05, update_interval_s: int = 1,
                 **config_overrides):
        """head_resources: what the head offers ({"CPU": 2}; GPU, memory,
        object_store_memory and custom resources too). worker_node_types: autoscaler node
        types, e.g. {"gpu4": {"resources": {"CPU": 4, "GPU": 4}, "min_workers": 0,
        "max_workers": 3}}. config_overrides: top-level keys of the autoscaling config
        (a "provider" dict is merged into the provider section)."""
        self._head_resources = dict(head_resources)
        self._worker_node_types = copy.deepcopy(worker_node_types)
        self._idle_timeout_minutes = idle_timeout_minutes
        # The autoscaler's loop (Ray's default: 5 s); 1 s, the least it takes, for tests.
        self._update_interval_s = int(update_interval_s)
        self._config_overrides = copy.deepcopy(config_overrides)
        self._dir: str | None = None
        self._address: str | None = None
        self._sid: int | None = None
        self._marker = uuid.uuid4().hex
        self.monitor_pid: int | None = None
        self._stopped = False

    # -- config ----------------------------------------------------------------------------
    def autoscaling_config(self, gcs_address: str) -> dict:
        worker_types = {}
        for name, spec in self._worker_node_types.items():
            spec = copy.deepcopy(spec)
            spec.setdefault("node_config", {})
            spec.setdefault("min_workers", 0)
            spec.setdefault("max_workers", 1)
            spec["labels"] = {NODE_GROUP_LABEL: name, **spec.get("labels", {})}
            worker_types[name] = spec
        config = {
            "cluster_name": f"raygang-fake-{self._marker[:8]}",
            "max_workers": sum(int(t["max_workers"]) for t in worker_types.values()),
            "provider": {
                "type": "fake_multinode",
                "use_node_id_as_ip": True,
                "disable_node_updaters": True,
                "disable_launch_config_check": True,
                "launch_multiple": True,  # else one node per launch, whatever the count
                "gcs_address": gcs_address,  # else <node ip>:6379
            },
            "available_node_types": {
                HEAD_NODE_TYPE: {"resources": dict(self._head_resources),
                                 "node_config": {}, "max_workers": 0},
                **worker_types,
            },
            "head_node_type": HEAD_NODE_TYPE,
            "upscaling_speed": 1000.0,
            "idle_timeout_minutes": self._idle_timeout_minutes,
            **copy.deepcopy(_NOT_USED_BY_FAKE_PROVIDER),
        }
        overrides = copy.deepcopy(self._config_overrides)
        config["provider"].update(overrides.pop("provider", {}))
        config.update(overrides)
        return config

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def address(self) -> str:
        if self._address is None:
            raise RuntimeError("FakeAutoscalingCluster is not started")
        return self._address

    @property
    def temp_dir(self) -> str | None:
        """Ray's --temp-dir of this cluster (removed by shutdown)."""
        return None if self._dir is None else os.path.join(self._dir, "ray")

    @property
    def logs_dir(self) -> str | None:
        if self.temp_dir is None:
            return None
        return os.path.join(self.temp_dir, "session_latest", "logs")

    def start(self, timeout_s: float = 60) -> None:
        if self._dir is not None:
            raise RuntimeError("FakeAutoscalingCluster.start() called twice")
        deadline = time.monotonic() + timeout_s
        # Short path: Ray's unix sockets live under it (limit ~107 chars).
        self._dir = tempfile.mkdtemp(prefix="rgfa-", dir="/tmp")
        atexit.register(self.shutdown)
        ip = ray._private.services.get_node_ip_address()
        port = free_port(ALL_INTERFACES)
        address = f"{ip}:{port}"
        config_path = os.path.join(self._dir, "autoscaling.yaml")
        with open(config_path, "w") as f:
            yaml.safe_dump(self.autoscaling_config(address), f, sort_keys=False)

        head = dict(self._head_resources)
        cmd = [
            sys.executable, "-m", "ray.scripts.scripts", "start", "--head",
            f"--node-ip-address={ip}", f"--port={port}", f"--temp-dir={self.temp_dir}",
            f"--autoscaling-config={config_path}",
            "--include-dashboard=false", f"--dashboard-port={free_port(ALL_INTERFACES)}",
            f"--ray-client-server-port={free_port(ALL_INTERFACES)}", "--dashboard-agent-listen-port=0",
            "--disable-usage-stats",
            f"--num-cpus={head.pop('CPU', 0)}", f"--num-gpus={head.pop('GPU', 0)}",
        ]
        if "memory" in head:
            cmd.append(f"--memory={int(head.pop('memory'))}")
        if "object_store_memory" in head:
            cmd.append(f"--object-store-memory={int(head.pop('object_store_memory'))}")
        if head:
            cmd.append(f"--resources={json.dumps(head)}")
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
        env.update({
            "RAY_FAKE_CLUSTER": "1",
            "RAY_AUTH_MODE": "disabled",
            "RAY_enable_autoscaler_v2": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "AUTOSCALER_UPDATE_INTERVAL_S": str(self._update_interval_s),  # whole seconds
            "AUTOSCALER_METRIC_PORT": str(free_port(ALL_INTERFACES)),
            _MARKER_ENV: self._marker,
        })
        # A new session: every process of this cluster (fake nodes and workers included)
        # stays in it, which is how shutdown() finds them.
        proc = subprocess.Popen(cmd, env=env, cwd=self._dir, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._sid = proc.pid
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            self.shutdown()
            raise TimeoutError(f"ray start did not return in {timeout_s} s:\n{out[-3000:]}")
        if proc.returncode != 0:
            self.shutdown()
            raise RuntimeError(f"ray start failed ({proc.returncode}):\n{out[-3000:]}")
        self._address = address
        try:
            self._wait_for_monitor(deadline)
        except BaseException:
            self.shutdown()
            raise

    def _wait_for_monitor(self, deadline: float) -> None:
        """Until the v1 monitor runs and has built its autoscaler from our config; fails
        fast if autoscaler v2 runs instead or the monitor died with a traceback."""
        log = Path(self.logs_dir, "monitor.log")
        err = Path(self.logs_dir, "monitor.err")
        while True:
            monitors = {_autoscaler_monitor(p): p for p in self.processes()}
            if "v2" in monitors:
                raise RuntimeError("autoscaler v2 started instead of v1: "
                                   + " ".join(cmdline(monitors["v2"])))
            text = log.read_text(errors="replace") if log.exists() else ""
            errors = err.read_text(errors="replace") if err.exists() else ""
            if "v1" in monitors and "StandardAutoscaler:" in text:
                self.monitor_pid = monitors["v1"].pid
                return
            if "Traceback" in errors or time.monotonic() > deadline:
                raise RuntimeError(f"autoscaler monitor not ready (running: {'v1' in monitors})"
                                   f"\nmonitor.log:\n{text[-2000:]}\nmonitor.err:\n"
                                   f"{errors[-3000:]}")
            time.sleep(0.2)

    # -- processes -------------------------------------------------------------------------
    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster: in its session, or naming its temp dir on the
        command line, or carrying its marker in the environment; and their descendants."""
        if self._dir is None:
            return []
        me = os.getpid()
        found: dict[int, psutil.Process] = {}
        for p in psutil.process_iter():
            if p.pid == me or not _alive(p):
                continue
            if self._owns(p):
                found[p.pid] = p
        for p in list(found.values()):
            try:
                for child in p.children(recursive=True):
                    if child.pid != me and _alive(child):
                        found.setdefault(child.pid, child)
            except psutil.Error:
                pass
        return sorted(found.values(), key=lambda p: p.pid)

    def _owns(self, p: psutil.Process) -> bool:
        try:
            if self._sid is not None and os.getsid(p.pid) == self._sid:
                return True
        except OSError:
            return False
        if any(self._dir + os.sep in a for a in cmdline(p)):
            return True
        try:
            return p.environ().get(_MARKER_ENV) == self._marker
        except (psutil.Error, OSError):
            return False

    def shutdown(self, timeout_s: float = 30) -> None:
        """Stop this cluster's processes only (never `ray stop`); idempotent. Raises if any
        is still alive after timeout_s."""
        if self._dir is None or self._stopped:
            return
        deadline = time.monotonic() + timeout_s
        # The monitor first, so that it launches no node while the rest goes down.
        for p in self.processes():
            if _autoscaler_monitor(p):
                _signal(p, signal.SIGKILL)
        # Most go on SIGTERM within ~2 s, but GCS, raylets and the runtime env agent ignore
        # it for longer than this throwaway cluster is worth: a short grace, then SIGKILL.
        grace = 1.0
        while True:
            procs = self.processes()
            if not procs:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("processes of the fake autoscaling cluster still alive: "
                                   + ", ".join(f"{p.pid} {' '.join(cmdline(p))[:120]}"
                                               for p in procs))
            for p in procs:
                _signal(p, signal.SIGTERM)
            _, alive = psutil.wait_procs(procs, timeout=grace)
            for p in alive:
                _signal(p, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=2)
            grace = 0.5
        self._stopped = True
        self._address = None
        shutil.rmtree(self._dir, ignore_errors=True)
        try:
            atexit.unregister(self.shutdown)
        except Exception:
            pass

    def __enter__(self) -> FakeAutoscalingCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.Error, OSError):
        return []


def _autoscaler_monitor(p: psutil.Process) -> str | None:
    """"v1" or "v2" for the autoscaler's monitor process (not the log monitor), else None."""
    for arg in cmdline(p):
        if arg.endswith(os.path.join("autoscaler", "_private", "monitor.py")):
            return "v1"
        if arg.endswith(os.path.join("autoscaler", "v2", "monitor.py")):
            return "v2"
    return None


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except psutil.Error:
        pass
