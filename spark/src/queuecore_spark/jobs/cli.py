"""``queuecore-spark archive|usage …``: the operator jobs, also runnable as ``spark-submit …/jobs/cli.py``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from queuecore_spark._http import DEFAULT_BASE_URL, ENV_ADMIN_TOKEN, ENV_API_KEY, ENV_BASE_URL, QueueCoreError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queuecore-spark", description=__doc__)
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    jobs = parser.add_subparsers(dest="job", required=True)

    archive = jobs.add_parser("archive", help="copy what is new in topics to Parquet")
    archive.add_argument("--out", required=True, type=Path, help="the archive's root directory")
    archive.add_argument("--api-key", help=f"default: ${ENV_API_KEY}")
    archive.add_argument("--base-url", help=f"default: ${ENV_BASE_URL}, else {DEFAULT_BASE_URL}")
    archive.add_argument("--project", default="default", help="the project's name in the layout")
    archive.add_argument("--environment", help="default: production for pq_live_ keys, else development")
    archive.add_argument(
        "--keys",
        type=Path,
        help="the JSON 'queuecore-server bootstrap --json' printed: archives each environment of the project",
    )
    archive.add_argument("--topics", help="comma-separated topic names (default: every topic)")

    usage = jobs.add_parser("usage", help="roll usage-metering events up into the usage tables")
    usage.add_argument("--admin-token", help=f"the operators' token (default: ${ENV_ADMIN_TOKEN})")
    usage.add_argument("--base-url", help=f"default: ${ENV_BASE_URL}, else {DEFAULT_BASE_URL}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("queuecore_spark").addHandler(handler)
    logging.getLogger("queuecore_spark").setLevel(logging.INFO)
    from queuecore_spark.jobs._session import session

    try:
        if args.job == "archive":
            from queuecore_spark.jobs import archive

            base_url = args.base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL
            if args.keys is not None:
                boot = json.loads(args.keys.read_text())
                sources = [
                    archive.Source(str(boot["projectId"]), env, key)
                    for env, key in sorted(boot["keys"].items())
                ]
            else:
                key = args.api_key or os.environ.get(ENV_API_KEY)
                if not key:
                    print(f"queuecore-spark: no API key (--api-key or ${ENV_API_KEY})", file=sys.stderr)
                    return 2
                sources = [archive.Source(args.project, args.environment or archive.environment_of(key), key)]
            topics = [t for t in args.topics.split(",") if t] if args.topics else None
            spark = session("queuecore-archive", args.master)
            added = archive.run(spark, args.out, sources, base_url, topics)
            print(json.dumps({"archived": added}))
        else:
            from queuecore_spark.jobs import usage

            token = args.admin_token or os.environ.get(ENV_ADMIN_TOKEN)
            if not token:
                print(
                    f"queuecore-spark: no admin token (--admin-token or ${ENV_ADMIN_TOKEN})", file=sys.stderr
                )
                return 2
            base_url = args.base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL
            spark = session("queuecore-usage", args.master)
            result = usage.run(spark, base_url, token)
            print(json.dumps(result.__dict__))
    except QueueCoreError as exc:
        print(f"queuecore-spark: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # spark-submit …/queuecore_spark/jobs/cli.py archive …
    sys.exit(main())
