"""The `raygang` command line: start the scheduler and API in a Ray cluster, and talk to
the REST API (submit, list, status, explain, cancel, queues, cluster, deploy, and
`job submit|list|status|logs|stop` for Ray Jobs).

Exit codes: 0 ok; 1 the API refused or the gang (job) did not succeed; 2 a usage error (bad
option, unreadable or invalid local file); 3 the API (or, for `start`, the Ray cluster)
cannot be reached. Every error is one line `error: ...` on stderr, never a traceback.
"""
