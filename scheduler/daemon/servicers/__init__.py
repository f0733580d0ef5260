"""gRPC servicers: one module per service, each translating messages and calling the logic."""
