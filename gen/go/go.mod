// The Go code generated from proto/groupcoord/v1 by clients/go/generate.sh, committed so
// that other modules can `go get` it (tagged gen/go/vX.Y.Z; tests/unit/test_go_stubs.py
// checks it equals a fresh generation). Its import path is the protos' go_package:
// github.com/groupcoord/groupcoord/gen/go/groupcoord/v1 (package groupcoordv1).
module github.com/groupcoord/groupcoord/gen/go

go 1.25.0

require (
	google.golang.org/grpc v1.81.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
)
