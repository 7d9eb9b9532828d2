"""`make demo`'s front door (deploy/Procfile.demo): nginx on 127.0.0.1:PORTAL_PORT with portal.conf.template, sending
long-polls and event streams to the stream server (127.0.0.1:PORTAL_STREAMS_PORT) and the rest to the web server
(127.0.0.1:PORTAL_WEB_PORT), as docker-compose.yml's proxy and the cluster's Ingress do. Its configuration and
scratch files go under PORTAL_DATA_DIR/nginx; it runs in the foreground, so honcho stops it with the rest."""

from __future__ import annotations

import os
import shutil
import string
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAIN = """worker_processes 1;
pid {prefix}/nginx.pid;
error_log stderr warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {prefix}/portal.conf;
}}
"""


def render(listen: str, web: str, streams: str, forwarded_for: str = "") -> str:
    """portal.conf.template with the addresses filled in (nginx's own $variables are left as they are)."""
    template = string.Template((HERE / "portal.conf.template").read_text())
    return template.safe_substitute(
        PORTAL_LISTEN=listen, PORTAL_WEB_ADDRESS=web, PORTAL_STREAMS_ADDRESS=streams, PORTAL_FORWARDED_FOR=forwarded_for
    )


def main() -> None:
    nginx = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if nginx is None:
        sys.exit(
            "nginx is not installed: `make demo` installs it (apt-get install nginx; on macOS: brew install nginx)."
        )
    prefix = Path(os.environ.get("PORTAL_DATA_DIR") or HERE.parents[1] / "var").resolve() / "nginx"
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "portal.conf").write_text(
        render(
            f"127.0.0.1:{os.environ['PORTAL_PORT']}",
            f"127.0.0.1:{os.environ['PORTAL_WEB_PORT']}",
            f"127.0.0.1:{os.environ['PORTAL_STREAMS_PORT']}",
        )
    )
    (prefix / "nginx.conf").write_text(MAIN.format(prefix=prefix))
    # nginx takes this process over, so honcho stops it with the others.
    os.execv(nginx, [nginx, "-p", str(prefix), "-e", "stderr", "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"])  # noqa: S606


if __name__ == "__main__":
    main()
