"""Render the front door's nginx config from the templates in deploy/nginx/.

Every template file is copied into `<fleet dir>/nginx/` with its `@@NAME@@` placeholders filled from
a `FrontDoorConfig` and the fleet's paths. The replica list (`upstreams.conf`) is written on its
own, so adding or removing a replica rewrites one small file and reloads nginx.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from serving.files import write_atomically

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "deploy" / "nginx"
# LibreTranslate's GET /spec answers our API document, as JSON (LibreTranslate's is its Swagger).
OPENAPI = Path(__file__).resolve().parent.parent / "docs" / "openapi.yaml"
SITE_SOURCE_DIR = TEMPLATE_DIR.parent / "site"  # the playground and status pages, served as they are
JS_MODULE_DIRS = ("/usr/lib/nginx/modules", "/usr/share/nginx/modules", "/etc/nginx/modules")
WORKER_USERS = ("www-data", "nginx", "nobody")


@dataclass(frozen=True)
class FrontDoorConfig:
    """The front door's numbers, one place; deploy/FLEET.md says why each is what it is."""

    listen: str = "127.0.0.1:8090"
    rate_per_second: int = 20  # per client key
    burst: int = 40  # requests over the rate a key may send at once before it gets 429
    body_limit_kib: int = 128  # the replicas' max_request_size
    char_limit: int = 5000  # per text: the replicas' max_chars_per_text (LibreTranslate's charLimit)
    read_timeout_s: int = 130  # above TorchServe's 120 s responseTimeout
    # The largest answer the front door holds while it waits for all of it (deploy/FLEET.md, "Whole
    # answers"): memory is committed only as an answer is written, so the bound costs nothing unused.
    answer_limit_kib: int = 16384
    tries: int = 3  # replicas one request may try
    retry_window_s: int = 300  # all tries of one request, together
    fail_timeout_s: int = 5  # a replica that failed is left out this long
    probe_timeout_s: int = 5  # one /healthz probe on one replica
    probe_window_s: int = 8  # the probe over every replica
    health_cache_s: int = 1  # /healthz answers from the last good probe this long
    # Slow and abusive clients (deploy/FLEET.md, "Abuse"): per-address limits, for what comes before
    # a key is known, and timeouts on every client read and write.
    connections_per_address: int = 64  # requests in progress at once from one address
    address_rate_per_second: int = 40  # LibreTranslate requests per address, before njs reads a body
    address_burst: int = 80
    header_timeout_s: int = 10  # the whole request header
    body_timeout_s: int = 10  # between two reads of the body
    send_timeout_s: int = 10  # between two writes of the response
    keepalive_timeout_s: int = 30  # an idle connection
    url_limit_kib: int = 64  # the request line: a LibreTranslate query string of 5,000 Chinese characters
    # A load balancer in front (its addresses, comma-separated CIDRs): its X-Forwarded-For names the
    # client, for the per-address limits and the access log. Empty: clients connect directly.
    real_ip_from: str = ""
    # Keyless (SECURITY.md, "Keyed or keyless"): a request with no key is served as the client of its
    # address, under the per-key rate counted per address; a wrong key is still refused. For a private
    # network only; off by default, and only an explicit flag turns it on.
    keyless: bool = False
    # /translate_file's translations wait this long for their download, at most this many at once.
    download_ttl_s: int = 1800
    downloads_kept: int = 1000

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[\w.\[\]:-]+:\d+", self.listen):
            raise ValueError(f"listen must be host:port, got {self.listen!r}")
        for name, value in asdict(self).items():
            if name in ("listen", "real_ip_from", "keyless"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for network in self.trusted_networks:
            if not re.fullmatch(r"[0-9A-Fa-f.:]+(/\d{1,3})?", network):
                raise ValueError(f"real_ip_from must be addresses or CIDRs, comma-separated, got {network!r}")

    @property
    def trusted_networks(self) -> list[str]:
        return [network.strip() for network in self.real_ip_from.split(",") if network.strip()]


@dataclass(frozen=True)
class FrontDoorPaths:
    """Where one front door keeps its rendered config, keys, logs, pid and temp files."""

    run_dir: Path

    @property
    def conf_dir(self) -> Path:
        return self.run_dir / "nginx"

    @property
    def conf(self) -> Path:
        return self.conf_dir / "nginx.conf"

    @property
    def upstreams(self) -> Path:
        return self.conf_dir / "upstreams.conf"

    @property
    def keys(self) -> Path:
        return self.run_dir / "keys.map"

    @property
    def pid(self) -> Path:
        return self.run_dir / "nginx.pid"

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    @property
    def worker_dir(self) -> Path:
        """What nginx's workers write and connect to: the /healthz cache, the LibreTranslate stage's socket.

        Under run_dir, unless the workers' user cannot reach it there: started as root, workers run as
        www-data, and a run_dir below a 0700 directory (root's pytest temp dirs) is out of their reach;
        then a directory of its own in the system temp dir, named after run_dir.
        """
        inside = self.run_dir / "worker"
        if os.geteuid() != 0 or _reachable_by_others(self.run_dir):
            return inside
        digest = hashlib.sha256(str(self.run_dir).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"zh_en-front-door-{digest}"

    @property
    def stage_socket(self) -> Path:
        return self.worker_dir / "libretranslate.sock"

    @property
    def site_dir(self) -> Path:
        """The pages' copy, beside the workers: they must read it, and may not reach the repository."""
        return self.worker_dir / "site"

    @property
    def status_targets(self) -> Path:
        return self.conf_dir / "status_targets.conf"

    @property
    def connection_zone_generation(self) -> Path:
        """The per-address connection zone's generation (nginx.conf; FrontDoor.renew_connection_slots)."""
        return self.run_dir / "connection_zone_generation"

    def zone_generation(self) -> int:
        try:
            return int(self.connection_zone_generation.read_text())
        except (OSError, ValueError):
            return 0

    def connection_zone(self) -> str:
        return f"per_address_conn_{self.zone_generation()}"


def render(config: FrontDoorConfig, paths: FrontDoorPaths, template_dir: Path = TEMPLATE_DIR) -> None:
    """Write every template into `paths.conf_dir` with its placeholders filled."""
    values = {
        "USER": _user_directive(),
        "RUN_DIR": str(paths.run_dir),
        "CONF_DIR": str(paths.conf_dir),
        "JS_MODULE": str(js_module()),
        "KEYS_FILE": str(paths.keys),
        "UPSTREAMS_FILE": str(paths.upstreams),
        "LISTEN": config.listen,
        "RATE": str(config.rate_per_second),
        "BURST": str(config.burst),
        "BODY_LIMIT_KIB": str(config.body_limit_kib),
        "CHAR_LIMIT": str(config.char_limit),
        "READ_TIMEOUT_S": str(config.read_timeout_s),
        "ANSWER_LIMIT_KIB": str(config.answer_limit_kib),
        "TRIES": str(config.tries),
        "RETRY_WINDOW_S": str(config.retry_window_s),
        "PROBE_TIMEOUT_S": str(config.probe_timeout_s),
        "PROBE_WINDOW_S": str(config.probe_window_s),
        "PROBE_LOCK_S": str(config.probe_window_s + 1),
        "HEALTH_CACHE_S": str(config.health_cache_s),
        "CONNECTIONS_PER_ADDRESS": str(config.connections_per_address),
        "CONNECTION_ZONE": paths.connection_zone(),
        "ADDRESS_RATE": str(config.address_rate_per_second),
        "ADDRESS_BURST": str(config.address_burst),
        "HEADER_TIMEOUT_S": str(config.header_timeout_s),
        "BODY_TIMEOUT_S": str(config.body_timeout_s),
        "SEND_TIMEOUT_S": str(config.send_timeout_s),
        "KEEPALIVE_TIMEOUT_S": str(config.keepalive_timeout_s),
        "URL_LIMIT_KIB": str(config.url_limit_kib),
        # The gate waits for the stage's whole answer: every try on a replica, then the last read.
        "STAGE_TIMEOUT_S": str(config.retry_window_s + config.read_timeout_s),
        "WORKER_DIR": str(paths.worker_dir),
        "SITE_DIR": str(paths.site_dir),
        "STATUS_TARGETS_FILE": str(paths.status_targets),
        "REAL_IP": _real_ip(config.trusted_networks),
        # Keyless: no key names the address as the client (a map value may hold a variable); keyed:
        # no key is a missing key (LibreTranslate's 400, our 401).
        "NO_KEY_CLIENT": '"address:$remote_addr"' if config.keyless else '""',
        "KEY_REQUIRED": "false" if config.keyless else "true",
        "DOWNLOAD_TTL_S": str(config.download_ttl_s),
        "DOWNLOADS_KEPT": str(config.downloads_kept),
    }
    for sub in (paths.conf_dir, paths.logs, paths.run_dir / "tmp"):
        sub.mkdir(parents=True, exist_ok=True)
    _make_worker_dir(paths.worker_dir)
    for template in sorted(template_dir.iterdir()):
        text = template.read_text()
        if unknown := set(re.findall(r"@@([A-Z_]+)@@", text)) - values.keys():
            raise KeyError(f"{template}: no value for placeholder(s) {sorted(unknown)}")
        text = re.sub(r"@@([A-Z_]+)@@", lambda match: values[match.group(1)], text)
        (paths.conf_dir / template.name).write_text(text)
    _copy_site(paths.site_dir)


def write_upstreams(paths: FrontDoorPaths, ports: Sequence[int], config: FrontDoorConfig) -> None:
    """The replica list nginx balances over; written whole, then swapped in atomically."""
    if not ports:
        raise ValueError("a front door needs at least one replica")
    lines = [f"server 127.0.0.1:{port} max_fails=1 fail_timeout={config.fail_timeout_s}s;" for port in ports]
    write_atomically(
        paths.upstreams, "# written by serving.fleet: one line per replica\n" + "\n".join(lines) + "\n"
    )


def write_status_targets(paths: FrontDoorPaths, metrics_ports: Mapping[str, int]) -> None:
    """Each replica's name and metrics port, for the status route (front_door.js, status())."""
    for name in metrics_ports:
        if not re.fullmatch(r"[\w-]+", name):
            raise ValueError(f"a replica name must be letters, digits, _ or -, got {name!r}")
    targets = " ".join(f"{name}:{port}" for name, port in metrics_ports.items())
    write_atomically(
        paths.status_targets,
        "# written by serving.fleet: replica name and metrics port\n" + f'set $status_targets "{targets}";\n',
    )


def _copy_site(site_dir: Path) -> None:
    """deploy/site/ as it is, readable by the workers (their directory is theirs: 0700)."""
    site_dir.mkdir(exist_ok=True)
    site_dir.chmod(0o755)
    for page in sorted(SITE_SOURCE_DIR.iterdir()):
        if page.is_file():
            shutil.copyfile(page, site_dir / page.name)
            (site_dir / page.name).chmod(0o644)
    spec = site_dir / "spec.json"  # GET /spec (libretranslate.conf)
    spec.write_text(json.dumps(yaml.safe_load(OPENAPI.read_text())) + "\n")
    spec.chmod(0o644)


def js_module() -> Path:
    for directory in JS_MODULE_DIRS:
        candidate = Path(directory) / "ngx_http_js_module.so"
        if candidate.exists():
            return candidate
    raise FileNotFoundError(
        "nginx's njs module (ngx_http_js_module.so) is missing: run `make nginx` "
        "(apt-get install nginx libnginx-mod-http-js)"
    )


def _real_ip(networks: list[str]) -> str:
    if not networks:
        return "# No load balancer in front (FrontDoorConfig.real_ip_from): the client is the peer."
    lines = [f"set_real_ip_from {network};" for network in networks]
    # The last address not one of the balancer's: a client cannot forge its way past the limits.
    return "\n        ".join([*lines, "real_ip_header X-Forwarded-For;", "real_ip_recursive on;"])


def _make_worker_dir(directory: Path) -> None:
    """0700, owned by the workers' user: the cache and the socket are theirs alone."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.geteuid() == 0 and (user := _worker_user()) is not None:
        os.chown(directory, user.pw_uid, user.pw_gid)
    directory.chmod(0o700)


def _reachable_by_others(path: Path) -> bool:
    """Every directory from / down to `path` lets other users through (o+x)."""
    return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in (path, *path.parents) if parent.exists())


def _worker_user() -> pwd.struct_passwd | None:
    for name in WORKER_USERS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


def _user_directive() -> str:
    """As root, nginx workers drop to an unprivileged user; otherwise they stay who started nginx."""
    if os.geteuid() != 0:
        return "# not root: workers run as the user who started nginx"
    if (user := _worker_user()) is not None:
        return f"user {user.pw_name} {grp.getgrgid(user.pw_gid).gr_name};"
    raise RuntimeError(f"none of the users {WORKER_USERS} exists to run nginx workers as")
