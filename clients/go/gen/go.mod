// The Go code generated from proto/groupcoord/v1 by ../generate.sh (not committed). Its
// import path is the protos' go_package: github.com/groupcoord/groupcoord/gen/go/groupcoord/v1
// (package groupcoordv1).
module github.com/groupcoord/groupcoord/gen/go

go 1.24

require (
	google.golang.org/grpc v1.81.0
	google.golang.org/protobuf v1.36.12
)
