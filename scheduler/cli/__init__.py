"""The `synergy` CLI (docs/cli.md).

gRPC's C core logs to stderr on its own (`I1123 ... ssl_transport_security.cc ...
CERTIFICATE_VERIFY_FAILED` on a TLS failure), which breaks the CLI's promise of one line per
error. Its verbosity is read once, when grpc is first imported, so it is turned off here,
before any module of the CLI imports grpc. A user who sets GRPC_VERBOSITY themselves (to
debug a connection) keeps their setting and GRPC_TRACE.
"""
import os

if "GRPC_VERBOSITY" not in os.environ:
    os.environ["GRPC_VERBOSITY"] = "NONE"
    os.environ["GRPC_TRACE"] = ""
