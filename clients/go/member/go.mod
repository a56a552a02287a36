module github.com/groupcoord/groupcoord/clients/go/member

go 1.25.0

// The stubs are the repository's gen/go module (committed; tagged gen/go/vX.Y.Z with this
// module's clients/go/member/vX.Y.Z). Inside this checkout they are used from the directory;
// a module depending on this one gets the tagged version (a replace applies only here).
replace github.com/groupcoord/groupcoord/gen/go => ../../../gen/go

require (
	github.com/groupcoord/groupcoord/gen/go v0.1.0
	google.golang.org/grpc v1.81.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
)
