"""Options from a configuration file, checked as a start would check them: what the command line (-c, -t,
a reload) and the embedding API (pynatsd.Server.from_config) share, so both refuse a file with the same
errors."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pynatsd.auth.users import Authenticator
from pynatsd.base import tls
from pynatsd.base.options import Options
from pynatsd.config.cluster import cluster_options
from pynatsd.config.jetstream import check_clustered
from pynatsd.protocol import encoder

if TYPE_CHECKING:
    from pynatsd.config.schema import ConfigWarning


def apply_file(opts: Options, path: str) -> list[ConfigWarning]:
    """Apply the configuration file at `path` to `opts` (its name and digest included); returns its
    warnings. Raises ValueError (ConfigError, ConfigValueError) or OSError with the text `pynatsd` prints."""
    from pynatsd.config.parser import parse_file  # with a file only (idle RSS)
    from pynatsd.config.schema import apply_config

    opts.config_file = path
    parsed = parse_file(path)
    opts.config_digest = config_digest(parsed)
    return apply_config(opts, parsed)


def check_options(opts: Options) -> None:
    """What a start would refuse, refused before it: the TLS files, JetStream in a cluster, permissions
    (e.g. allow_responses). Raises ValueError or OSError."""
    tls.check(opts)
    check_clustered(opts, cluster_options(opts) is not None)
    Authenticator(opts)


def config_digest(parsed: dict[str, Any]) -> str:
    """nats-server's digest of a parsed configuration: sha256 of its Go JSON encoding plus a newline (as
    json.Encoder writes it), so both servers log the same digest for the same file."""

    def go_value(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: go_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [go_value(v) for v in value]
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
            return int(value)  # Go prints float64(2) as 2
        if isinstance(value, datetime):  # Go's time.Time in JSON
            return value.strftime("%Y-%m-%dT%H:%M:%SZ")
        return value

    import hashlib  # with OpenSSL's libcrypto: 4 MiB of RSS that a server without a file does without

    text = encoder.go_json(go_value(parsed), sort_keys=True)
    return "sha256:" + hashlib.sha256((text + "\n").encode()).hexdigest()
