module github.com/groupcoord/groupcoord/clients/go/member

go 1.25.0

// The generated stubs are not committed: ../generate.sh writes them into ../gen (its own
// module). A module that depends on this one needs the same replace (README: "Depending on it").
replace github.com/groupcoord/groupcoord/gen/go => ../gen

require (
	github.com/groupcoord/groupcoord/gen/go v0.0.0-00010101000000-000000000000
	google.golang.org/grpc v1.81.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
)
