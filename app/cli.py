"""``queuecore-server``: the operator CLI (serve, migrate, backup, restore, users, bootstrap, keys, projects,
alerts).

Exit codes: 0 success, 1 a refused operation (not found, conflict, invalid value), 2 bad arguments,
3 ``KEY_LIMIT_REACHED``, 4 a store is unavailable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import sysconfig
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.broker import alerts, keys, sessions, tenancy
from app.broker.errors import BrokerError, KeyLimitReached, Unavailable
from app.broker.rate_limits import Tier
from app.settings import Settings, get_settings, unknown_environment_names
from app.stores.errors import StoreUnavailable
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.protocol import MetadataStore

if TYPE_CHECKING:
    import uvicorn

DEMO_EMAIL = "demo@queuecore.local"
EXIT_REFUSED, EXIT_USAGE, EXIT_KEY_LIMIT, EXIT_UNAVAILABLE = 1, 2, 3, 4


def _print(payload: Any, as_json: bool, human: str) -> None:
    print(json.dumps(payload, indent=None if as_json else 2) if as_json else human)


def migrations_root() -> Path:
    """Where ``alembic.ini`` and ``migrations/`` are: the checkout this runs from, else the data files the
    installed wheel put under ``<prefix>/share/queuecore-server`` (pyproject.toml's data-files)."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "alembic.ini").is_file():
        return checkout
    return Path(sysconfig.get_path("data")) / "share" / "queuecore-server"


def migrate(settings: Settings) -> None:
    """Bring the metadata schema to the newest migration."""
    from alembic import command
    from alembic.config import Config

    root = migrations_root()
    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "migrations"))
    config.attributes["url"] = settings.resolved_database_url
    tls = settings.database_tls()
    config.attributes["connect_args"] = {"ssl": tls} if tls is not None else {}
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    command.upgrade(config, "head")


async def _with_store(settings: Settings, work: Callable[[MetadataStore], Awaitable[int]]) -> int:
    store = SqlMetadataStore(settings.resolved_database_url, pool_size=2, tls=settings.database_tls())
    try:
        return await work(store)
    finally:
        await store.close()


async def cmd_users_create(args: argparse.Namespace, store: MetadataStore) -> int:
    async with store.unit() as uow:
        user = await tenancy.create_user(uow, args.email, args.password)
    _print({"id": user.id, "email": user.email}, args.json, f"created user {user.id} <{user.email}>")
    return 0


async def cmd_users_disable(args: argparse.Namespace, store: MetadataStore, disabled: bool) -> int:
    async with store.unit() as uow:
        user, ended = await sessions.set_disabled(uow, args.email, disabled)
    state = "disabled" if disabled else "enabled"
    human = f"{state} user {user.id} <{user.email}>"
    if disabled:
        human += f"; {ended} dashboard session{'s' if ended != 1 else ''} ended"
    _print(
        {"id": user.id, "email": user.email, "disabled": disabled, "sessionsEnded": ended}, args.json, human
    )
    return 0


def _dashboard_url(settings: Settings) -> str:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}/dashboard"


async def cmd_bootstrap(
    args: argparse.Namespace, store: MetadataStore, secret: bytes, settings: Settings
) -> int:
    tier = tenancy.parse_tier(args.tier) if args.tier else None
    login: dict[str, str | None] | None = None
    async with store.unit() as uow:
        owner_id = None
        if args.demo_user:
            # The password is set when the login is created and kept on reruns (``make run`` twice must
            # not sign anyone out silently); --reset-password sets and shows a new one.
            user = await tenancy.get_user_by_email(uow, DEMO_EMAIL)
            fresh = secrets.token_urlsafe(12)
            password: str | None = fresh
            if user is None:
                user = await tenancy.create_user(uow, DEMO_EMAIL, fresh)
            elif args.reset_password:
                await tenancy.set_password(uow, user, fresh)
            else:
                password = None
            owner_id = user.id
            login = {"email": DEMO_EMAIL, "password": password, "url": _dashboard_url(settings)}
        project = await tenancy.ensure_project(uow, args.project, tier, owner_id)
        issued = {env: await keys.rotate_key(uow, secret, project.id, env) for env in tenancy.ENVIRONMENTS}
    payload: dict[str, Any] = {"projectId": project.id, "keys": {env: k.key for env, k in issued.items()}}
    if args.json:
        if login:
            payload["login"] = login
        print(json.dumps(payload))
        return 0
    lines = [f"Project {project.name} ({project.id}), tier {project.tier}", "API keys (shown once):"]
    lines += [f"  {env:<12} {k.key}" for env, k in issued.items()]
    if login:
        shown = login["password"] or (
            "unchanged (printed when the login was created; `make run RESET_PASSWORD=1` or "
            "`queuecore-server bootstrap --project demo --demo-user --reset-password` sets a new one)"
        )
        lines += [
            f"Dashboard login: {login['url']}",
            f"  email     {login['email']}",
            f"  password  {shown}",
        ]
    print("\n".join(lines))
    return 0


async def cmd_keys_create(args: argparse.Namespace, store: MetadataStore, secret: bytes) -> int:
    async with store.unit() as uow:
        issued = await keys.create_key(uow, secret, args.project, args.environment)
    _print({"id": issued.id, "key": issued.key}, args.json, f"{issued.id} {issued.key}  (shown once)")
    return 0


async def cmd_keys_revoke(args: argparse.Namespace, store: MetadataStore) -> int:
    async with store.unit() as uow:
        row = await keys.revoke_key(uow, args.id)
    _print(keys.key_view(row), args.json, f"revoked {row.id}")
    return 0


async def cmd_keys_list(args: argparse.Namespace, store: MetadataStore) -> int:
    async with store.unit() as uow:
        rows = await keys.list_keys(uow, args.project)
    views = [keys.key_view(r) for r in rows]
    human = "\n".join(
        f"{v['id']}  {v['environment']:<12} {v['display']}  {v['status']}  created {v['createdAt']}"
        for v in views
    )
    _print(views, args.json, human or "no keys")
    return 0


async def cmd_projects_create(args: argparse.Namespace, store: MetadataStore) -> int:
    async with store.unit() as uow:
        project = await tenancy.create_project(uow, args.name, tenancy.parse_tier(args.tier))
    _print(tenancy.project_view(project), args.json, f"created project {project.id} {project.name}")
    return 0


async def cmd_projects_list(args: argparse.Namespace, store: MetadataStore) -> int:
    async with store.unit() as uow:
        rows = await tenancy.list_projects(uow)
    views = [tenancy.project_view(p) for p in rows]
    _print(
        views, args.json, "\n".join(f"{v['id']}  {v['name']}  {v['tier']}" for v in views) or "no projects"
    )
    return 0


async def cmd_projects_set_tier(args: argparse.Namespace, store: MetadataStore) -> int:
    limits = tenancy.parse_custom_limits(args.limits) if args.limits else None
    async with store.unit() as uow:
        project = await tenancy.set_tier(uow, args.project, tenancy.parse_tier(args.tier), limits)
    _print(
        tenancy.project_view(project), args.json, f"project {project.id} is now on the {project.tier} tier"
    )
    return 0


def _alert_policy(settings: Settings) -> alerts.AlertPolicy:
    from app.main import build_alert_policy  # the app and its routes only load when a command needs them

    return build_alert_policy(settings)


async def cmd_alerts_set(args: argparse.Namespace, store: MetadataStore, settings: Settings) -> int:
    async with store.unit() as uow:
        project = await tenancy.get_project(uow, args.project)
        view = await alerts.set_endpoint(
            uow,
            _alert_policy(settings),
            project.id,
            args.environment,
            args.url,
            args.secret,
        )
    human = f"alerts for {project.name} ({args.environment}) go to {view.url} (secret …{view.secret_hint})"
    if view.secret:
        human += f"\nsigning secret (shown once): {view.secret}"
    _print(view.to_wire(), args.json, human)
    return 0


async def cmd_alerts_show(args: argparse.Namespace, store: MetadataStore, settings: Settings) -> int:
    async with store.unit() as uow:
        project = await tenancy.get_project(uow, args.project)
        policy = _alert_policy(settings)
        view = await alerts.get_endpoint(uow, policy, project.id, args.environment)
    _print(view.to_wire(), args.json, f"{view.url}  secret …{view.secret_hint}  breaker {view.state}")
    return 0


async def cmd_alerts_test(args: argparse.Namespace, store: MetadataStore) -> int:
    async with store.unit() as uow:
        project = await tenancy.get_project(uow, args.project)
        event_id = await alerts.send_test_event(uow, project.id, args.environment)
    _print({"eventId": event_id}, args.json, f"queued test event {event_id} (sent by the running server)")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queuecore-server", description="Operate a QueueCore server.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the API (host and port default to QUEUECORE_HOST/PORT)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    sub.add_parser("migrate", help="apply metadata migrations")
    back = sub.add_parser(
        "backup", help="copy metadata, then logs, into a new directory while the server serves"
    )
    back.add_argument("directory", type=Path, help="where to write the backup (must be empty or new)")
    back.add_argument("--json", action="store_true")
    rest = sub.add_parser(
        "restore", help="load a backup into a fresh database and log directory (server stopped)"
    )
    rest.add_argument("directory", type=Path, help="a directory `backup` wrote")
    rest.add_argument("--json", action="store_true")

    users = sub.add_parser("users", help="dashboard accounts").add_subparsers(dest="action", required=True)
    uc = users.add_parser("create", help="create an account user")
    uc.add_argument("--email", required=True)
    uc.add_argument("--password", required=True)
    uc.add_argument("--json", action="store_true")
    ud = users.add_parser("disable", help="refuse a user's sign-in and end their dashboard sessions at once")
    ud.add_argument("--email", required=True)
    ud.add_argument("--json", action="store_true")
    ue = users.add_parser("enable", help="let a disabled user sign in again")
    ue.add_argument("--email", required=True)
    ue.add_argument("--json", action="store_true")

    boot = sub.add_parser("bootstrap", help="create a project if missing and issue one key per environment")
    boot.add_argument("--project", required=True, help="project name (or id)")
    boot.add_argument("--tier", choices=[t.value for t in Tier])
    boot.add_argument("--json", action="store_true")
    boot.add_argument(
        "--demo-user", action="store_true", help=f"also create the login {DEMO_EMAIL} (kept on reruns)"
    )
    boot.add_argument(
        "--reset-password", action="store_true", help="with --demo-user: set and print a new password"
    )

    keys_ = sub.add_parser("keys", help="API keys").add_subparsers(dest="action", required=True)
    kc = keys_.add_parser("create", help="issue a key (at most two active per environment)")
    kc.add_argument("--project", required=True, help="project id or name")
    kc.add_argument("--environment", required=True, choices=list(tenancy.ENVIRONMENTS))
    kc.add_argument("--json", action="store_true")
    kr = keys_.add_parser("revoke", help="revoke a key; honoured by every API process within a second")
    kr.add_argument("--id", required=True)
    kr.add_argument("--json", action="store_true")
    kl = keys_.add_parser("list", help="list a project's keys (never the secrets)")
    kl.add_argument("--project", required=True, help="project id or name")
    kl.add_argument("--json", action="store_true")

    projects = sub.add_parser("projects", help="projects and tiers").add_subparsers(
        dest="action", required=True
    )
    pc = projects.add_parser("create", help="create a project")
    pc.add_argument("--name", required=True)
    pc.add_argument("--tier", default="developer", choices=[t.value for t in Tier])
    pc.add_argument("--json", action="store_true")
    pl = projects.add_parser("list", help="list projects")
    pl.add_argument("--json", action="store_true")
    pt = projects.add_parser(
        "set-tier", help="change a project's tier (and custom limits and quotas, enterprise)"
    )
    pt.add_argument("--project", required=True, help="project id or name")
    pt.add_argument("--tier", required=True, choices=[t.value for t in Tier])
    pt.add_argument(
        "--limits",
        help="enterprise only: publish=N,consume=N,admin=N (requests/s) and quotas topics=N,partitions=N,"
        "groups=N,schedules=N,pushGroups=N,storedBytes=N|<n>GiB|<n>TiB; left out: the pro tier's",
    )
    pt.add_argument("--json", action="store_true")

    alerts_ = sub.add_parser("alerts", help="a project environment's alert webhook").add_subparsers(
        dest="action", required=True
    )
    aset = alerts_.add_parser("set", help="set the alert endpoint (a secret is generated if not given)")
    aset.add_argument("--project", required=True, help="project id or name")
    aset.add_argument("--environment", required=True, choices=tenancy.ENVIRONMENTS)
    aset.add_argument("--url", required=True)
    aset.add_argument("--secret", help="signing secret, 16-255 characters")
    aset.add_argument("--json", action="store_true")
    ashow = alerts_.add_parser("show", help="show the alert endpoint and its breaker (not the secret)")
    ashow.add_argument("--project", required=True, help="project id or name")
    ashow.add_argument("--environment", required=True, choices=tenancy.ENVIRONMENTS)
    ashow.add_argument("--json", action="store_true")
    atest = alerts_.add_parser("test", help="queue a test event for the endpoint")
    atest.add_argument("--project", required=True, help="project id or name")
    atest.add_argument("--environment", required=True, choices=tenancy.ENVIRONMENTS)
    atest.add_argument("--json", action="store_true")
    return parser


def _serve(settings: Settings, host: str | None, port: int | None) -> int:
    from app.kit.http_protocol import HttpProtocol
    from app.kit.logs import configure_logging

    configure_logging(settings.log_level)
    sys.setswitchinterval(settings.gil_switch_interval_ms / 1000)
    # uvicorn builds the protocol itself (in this process): its bounds are set on the class.
    HttpProtocol.max_head_bytes = settings.http_max_head_bytes
    HttpProtocol.head_timeout = settings.http_head_timeout_seconds
    HttpProtocol.body_timeout = settings.http_body_timeout_seconds
    HttpProtocol.anonymous_body_timeout = settings.http_anonymous_body_timeout_seconds
    HttpProtocol.body_min_rate = settings.http_body_min_rate
    from app.api.draining import drain
    from app.kit.serving import DrainingServer
    from app.main import create_app

    application = create_app(settings)
    config = server_config(settings, application, host, port)
    # The first SIGTERM drains (app/api/draining.py) before uvicorn's own graceful shutdown.
    DrainingServer(config, lambda: drain(application)).run()
    return 0


def server_config(settings: Settings, application: Any, host: str | None, port: int | None) -> uvicorn.Config:
    """How ``serve`` runs ``application`` under uvicorn (a test serves an app of its own with it)."""
    import uvicorn

    proxies = settings.trusted_proxy_list()
    return uvicorn.Config(
        application,
        host=host or settings.host,
        port=port or settings.port,
        log_config=None,
        access_log=False,
        loop="auto",
        # httptools, with the request head bounded in size and time (app/kit/http_protocol.py).
        http="app.kit.http_protocol:HttpProtocol",
        # uvicorn's sans-I/O websockets implementation, closing quickly and tunable per connection.
        ws="app.kit.websocket_protocol:WebSocketProtocol",
        # Client frames are acks, nacks and extends: 1,000 ids fit in well under this.
        ws_max_size=settings.ws_max_frame_bytes,
        ws_ping_interval=settings.ws_ping_interval_seconds,
        ws_ping_timeout=settings.ws_ping_timeout_seconds,
        ws_per_message_deflate=settings.ws_compression,
        lifespan="on",
        # Forwarded headers only from QUEUECORE_TRUSTED_PROXIES; uvicorn's own default believes any
        # client on 127.0.0.1, which let a local client pick the address it is counted as.
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or [],
        # After draining (SIGTERM): the requests in flight get this long to finish.
        timeout_graceful_shutdown=max(1, round(settings.shutdown_timeout_seconds)),
    )


def _backup_or_restore(args: argparse.Namespace, settings: Settings) -> int:
    """``backup DIR`` / ``restore DIR`` (``app.backups``), with the stores ``serve`` would use."""
    from app import backups
    from app.main import build_log_engine
    from app.stores.log.protocol import BackupUnsupported

    run = backups.backup if args.command == "backup" else backups.restore
    if args.command == "restore":
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = build_log_engine(settings)
    try:
        manifest = asyncio.run(
            run(args.directory, settings.resolved_database_url, engine, settings.log_engine.value)
        )
    except (backups.BackupError, BackupUnsupported) as exc:
        print(f"queuecore-server: {args.command} refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    records = sum(p["end_offset"] - p["first_offset"] for p in manifest.partitions)
    verb = "backed up" if args.command == "backup" else "restored"
    human = (
        f"{verb} {manifest.database} metadata and {len(manifest.partitions)} partition(s) "
        f"({records} records) of the {manifest.engine} engine, {args.directory}"
    )
    if args.command == "restore":
        human += "; next: `queuecore-server migrate`, then `serve` (with the same QUEUECORE_SECRET_KEY)"
    _print(
        {
            "directory": str(args.directory),
            "createdAt": manifest.created_at,
            "partitions": manifest.partitions,
        },
        args.json,
        human,
    )
    return 0


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    command = args.command
    if command == "serve":
        return _serve(settings, args.host, args.port)
    if command in ("backup", "restore"):
        return _backup_or_restore(args, settings)
    if command == "migrate":
        migrate(settings)
        print("metadata schema is up to date")
        return 0
    secret = settings.server_secret()
    action = getattr(args, "action", None)
    handlers: dict[tuple[str, str | None], Callable[[MetadataStore], Awaitable[int]]] = {
        ("users", "create"): lambda s: cmd_users_create(args, s),
        ("users", "disable"): lambda s: cmd_users_disable(args, s, True),
        ("users", "enable"): lambda s: cmd_users_disable(args, s, False),
        ("bootstrap", None): lambda s: cmd_bootstrap(args, s, secret, settings),
        ("keys", "create"): lambda s: cmd_keys_create(args, s, secret),
        ("keys", "revoke"): lambda s: cmd_keys_revoke(args, s),
        ("keys", "list"): lambda s: cmd_keys_list(args, s),
        ("projects", "create"): lambda s: cmd_projects_create(args, s),
        ("projects", "list"): lambda s: cmd_projects_list(args, s),
        ("projects", "set-tier"): lambda s: cmd_projects_set_tier(args, s),
        ("alerts", "set"): lambda s: cmd_alerts_set(args, s, settings),
        ("alerts", "show"): lambda s: cmd_alerts_show(args, s, settings),
        ("alerts", "test"): lambda s: cmd_alerts_test(args, s),
    }
    return asyncio.run(_with_store(settings, handlers[(command, action)]))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = get_settings()
    except ValueError as exc:
        print(f"queuecore-server: invalid settings: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for name in unknown_environment_names():
        # The name only: a value may be a secret set under a misspelt name.
        print(f"queuecore-server: warning: {name} is not a setting and is ignored", file=sys.stderr)
    try:
        return _dispatch(args, settings)
    except KeyLimitReached as exc:
        print(f"queuecore-server: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_KEY_LIMIT
    except (Unavailable, StoreUnavailable) as exc:
        print(f"queuecore-server: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except BrokerError as exc:
        print(f"queuecore-server: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
