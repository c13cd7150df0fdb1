package grpc_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	vgrpc "github.com/velo-go/velo/transport/grpc"
)

// framedDataType is the reference's velo.proto FramedData, described at
// run time, so the official protobuf encoder can check the hand encoding.
func framedDataType(t *testing.T) protoreflect.MessageType {
	t.Helper()
	field := func(name string, n int32) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{
			Name: proto.String(name), Number: proto.Int32(n), JsonName: proto.String(name),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			Type:  descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum(),
		}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("velo.proto"), Package: proto.String("velo.streaming.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name:  proto.String("FramedData"),
			Field: []*descriptorpb.FieldDescriptorProto{field("preamble", 1), field("header", 2), field("payload", 3)},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dynamicpb.NewMessageType(fd.Messages().ByName("FramedData"))
}

// TestGoldenMatchesTheProtobufEncoder: each golden vector decodes, with
// the official decoder, into the fields the frame has, and the official
// encoder writes the same bytes back.
func TestGoldenMatchesTheProtobufEncoder(t *testing.T) {
	mt := framedDataType(t)
	fields := mt.Descriptor().Fields()
	for _, g := range framedGolden {
		want := unhex(t, g.hex)
		m := mt.New().Interface()
		if err := proto.Unmarshal(want, m); err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		r := m.ProtoReflect()
		pre := r.Get(fields.ByName("preamble")).Bytes()
		if len(pre) != 11 || pre[2] != byte(g.f.Type) ||
			!bytes.Equal(r.Get(fields.ByName("header")).Bytes(), g.f.Header) ||
			!bytes.Equal(r.Get(fields.ByName("payload")).Bytes(), g.f.Payload) {
			t.Fatalf("%s: the protobuf decoder read other fields", g.name)
		}
		out, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil || !bytes.Equal(out, want) || !bytes.Equal(vgrpc.AppendFramedData(nil, g.f), out) {
			t.Fatalf("%s: protobuf encodes %x (%v), the vector is %x", g.name, out, err, want)
		}
	}
}
