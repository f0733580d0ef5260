"""Generated gRPC stubs of the synergyd protocol (package synergy.v1).

Sources: protos/synergy/v1/*.proto; regenerate with `python protos/generate.py`.
Services: JobService (iterator), NodeService (agent), AdminService (CLI).
"""
