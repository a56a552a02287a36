module github.com/groupcoord/groupcoord/clients/go

go 1.25.0

// the stubs: the repository's gen/go module (committed), at this checkout
replace github.com/groupcoord/groupcoord/gen/go => ../../gen/go

// the load driver's KIP-848 members are the member library's (its own module, next door)
replace github.com/groupcoord/groupcoord/clients/go/member => ./member

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/groupcoord/groupcoord/clients/go/member v0.1.0
	github.com/groupcoord/groupcoord/gen/go v0.1.0
	google.golang.org/grpc v1.81.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
)

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)
