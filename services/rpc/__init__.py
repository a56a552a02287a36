"""What serves groupcoord's RPCs: the RPCs as the proto declares them (``rpcs``), one way to
invoke them (``invoke``) and the transports around it -- the unary gRPC server
(``grpc_server``), the gateway's batch stream (``batch_calls``) and ``groupcoord dev``'s calls
within its process (``local_calls``) -- with the deadlines of in-process calls
(``deadlines``) and the principals of callers (``principal``)."""
