package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ordo-actors/ordo/actors"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/pluginpb"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the generator's output")

// compile runs protoc on files (names relative to the include paths:
// dirs, the repository root, /usr/include) and returns the plugin request
// protoc would send, with paths=source_relative. Without protoc on PATH
// the test is skipped.
func compile(t *testing.T, dirs []string, files ...string) *pluginpb.CodeGeneratorRequest {
	t.Helper()
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc is not on PATH (Debian: protobuf-compiler); the generator's tests need it")
	}
	set := filepath.Join(t.TempDir(), "set.binpb")
	var args []string
	for _, d := range append(dirs, "../..", "/usr/include") {
		args = append(args, "-I", d)
	}
	args = append(args, "--include_imports", "--include_source_info", "--descriptor_set_out="+set)
	out, err := exec.Command(protoc, append(args, files...)...).CombinedOutput()
	require.NoError(t, err, "protoc: %s", out)
	data, err := os.ReadFile(set)
	require.NoError(t, err)
	var fds descriptorpb.FileDescriptorSet
	require.NoError(t, proto.Unmarshal(data, &fds))
	return &pluginpb.CodeGeneratorRequest{
		FileToGenerate:  files,
		Parameter:       proto.String("paths=source_relative"),
		ProtoFile:       fds.File,
		CompilerVersion: protocVersionOf(t, protoc),
	}
}

func protocVersionOf(t *testing.T, protoc string) *pluginpb.Version {
	t.Helper()
	out, err := exec.Command(protoc, "--version").Output()
	require.NoError(t, err)
	m := regexp.MustCompile(`(\d+)\.(\d+)\.(\d+)`).FindStringSubmatch(string(out))
	require.NotNil(t, m, "protoc --version: %s", out)
	n := func(s string) *int32 {
		v, err := strconv.Atoi(s)
		require.NoError(t, err)
		return proto.Int32(int32(v))
	}
	return &pluginpb.Version{Major: n(m[1]), Minor: n(m[2]), Patch: n(m[3]), Suffix: proto.String("")}
}

// run runs the plugin on req as protoc would.
func run(t *testing.T, req *pluginpb.CodeGeneratorRequest) *pluginpb.CodeGeneratorResponse {
	t.Helper()
	gen, err := protogen.Options{}.New(req)
	require.NoError(t, err)
	if err := generate(gen); err != nil {
		gen.Error(err)
	}
	return gen.Response()
}

func generated(t *testing.T, resp *pluginpb.CodeGeneratorResponse) map[string]string {
	t.Helper()
	require.Empty(t, resp.GetError())
	files := make(map[string]string)
	for _, f := range resp.GetFile() {
		files[f.GetName()] = f.GetContent()
	}
	return files
}

// The generator's output for testdata/cart.proto is the golden file, and
// for the committed services it is the committed code (as make
// verify-proto checks too). A file without services gets nothing.
func TestGolden(t *testing.T) {
	files := generated(t, run(t, compile(t, []string{"testdata"},
		"cart.proto", "proto/bankpb/bank.proto", "proto/testsvcpb/counter.proto", "proto/testpb/test.proto")))
	require.Len(t, files, 3, "files generated: %v", keys(files))
	for name, path := range map[string]string{
		"cart_ordo.pb.go":                    "testdata/cart_ordo.pb.go.golden",
		"proto/bankpb/bank_ordo.pb.go":       "../../proto/bankpb/bank_ordo.pb.go",
		"proto/testsvcpb/counter_ordo.pb.go": "../../proto/testsvcpb/counter_ordo.pb.go",
	} {
		got, ok := files[name]
		require.True(t, ok, "%s not generated: %v", name, keys(files))
		if *update && strings.HasSuffix(path, ".golden") {
			require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err)
		if got != string(want) {
			t.Errorf("%s differs from %s (go test -update rewrites goldens; make proto the committed files):\n%s",
				name, path, firstDiff(string(want), got))
		}
	}
}

// The golden file shows what each rule produces; these are the rules
// themselves.
func TestGeneratedAPI(t *testing.T) {
	files := generated(t, run(t, compile(t, []string{"testdata"}, "cart.proto")))
	src := files["cart_ordo.pb.go"]
	for _, want := range []string{
		`const CartServiceKindName = "shop.cart"`,    // (ordo.v1.kind).name
		`const HTTPSessionKindName = "http_session"`, // derived
		"func NewCartServiceClient(inv actors.Invoker) CartServiceClient",
		"func (c CartServiceClient) Add(ctx context.Context, id string, req *AddItem, opts ...actors.CallOption) (*Cart, error)",
		"return actors.Call[*Cart](ctx, c.inv, actors.Ref{Kind: CartServiceKindName, ID: id}, req, opts...)",
		"func (c CartServiceClient) Clear(ctx context.Context, id string, req *emptypb.Empty, opts ...actors.CallOption) (*emptypb.Empty, error)",
		"Get(c *actors.Context[S], req *GetCart) (*Cart, error)",
		"actors.On[S, *AddItem, *Cart](srv.Add),",
		"actors.OnRead[S, *GetCart, *Cart](srv.Get),",
		"actors.On[S, *emptypb.Empty, *emptypb.Empty](srv.Clear),",
		"func CartServiceHandlers[S proto.Message](srv CartServiceServer[S]) []actors.Option[S]",
		"func NewCartServiceKind[S proto.Message](newState func() S, srv CartServiceServer[S], extra ...actors.Option[S]) (*actors.KindOf[S], error)",
		"func MustCartServiceKind[S proto.Message](newState func() S, srv CartServiceServer[S], extra ...actors.Option[S]) *actors.KindOf[S]",
		"type CartServiceRequester[S proto.Message] struct{}",
		"func (CartServiceRequester[S]) Add(c *actors.Context[S], id string, req *AddItem, requestID string, then func(c *actors.Context[S], reply *Cart, err error))",
		"// Old does nothing.\n//\n// Deprecated: Do not use.\nfunc (c CartServiceClient) Old(",
		"// Clear sends req to entity id and waits for its reply.",
		"// CartService is a shopping cart.\ntype CartServiceClient struct",
	} {
		require.Contains(t, src, want)
	}
}

// Services that cannot describe an entity kind fail generation, and
// nothing is written.
func TestRejectedServices(t *testing.T) {
	for _, c := range []struct {
		name, service, want string
	}{
		{"client stream", `service S { rpc Up(stream A) returns (B); }`,
			"bad.proto: method S.Up streams: an entity handler takes one request and gives one reply"},
		{"server stream", `service S { rpc Watch(A) returns (stream B); }`,
			"method S.Watch streams"},
		{"shared request", `service S { rpc One(A) returns (B); rpc Two(A) returns (A); }`,
			"methods S.One and S.Two both take t.A: an entity dispatches on the request type"},
		{"kind name", `service S { option (ordo.v1.kind).name = "Bad Name"; rpc One(A) returns (B); }`,
			`service S: kind name "Bad Name" is invalid`},
		{"derived kind name", `service _S { rpc One(A) returns (B); }`,
			`service _S: kind name "_s" is invalid: want [a-z][a-z0-9_.-]{0,63} (set option (ordo.v1.kind).name)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src := `syntax = "proto3"; package t; import "proto/ordopb/options.proto";
option go_package = "example.com/t"; message A {} message B {}
service Fine { rpc One(A) returns (B); }
` + c.service
			require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.proto"), []byte(src), 0o644))
			resp := run(t, compile(t, []string{dir}, "bad.proto"))
			require.Contains(t, resp.GetError(), c.want)
			require.Empty(t, resp.GetFile())
		})
	}
}

func TestDefaultKindName(t *testing.T) {
	for service, want := range map[string]string{
		"AccountService": "account",
		"Account":        "account",
		"HTTPSession":    "http_session",
		"V2Store":        "v2_store",
		"ShoppingCart":   "shopping_cart",
		"Service":        "service",
		"IOService":      "io",
		"Job_Runner":     "job_runner",
	} {
		require.Equal(t, want, defaultKindName(service), service)
	}
}

// The plugin checks kind names with the rule of actors.NewKind.
func TestKindNameRuleMatchesActors(t *testing.T) {
	for _, name := range []string{
		"account", "shop.cart", "a-b_c.9", "a", strings.Repeat("a", 64), strings.Repeat("a", 65),
		"", "Account", "9a", "_a", "a b", "a/b", "a:b", "ü",
	} {
		_, err := actors.NewKind(name, func() *emptypb.Empty { return new(emptypb.Empty) })
		require.Equal(t, err == nil, kindNameRE.MatchString(name), "%q: actors.NewKind says %v", name, err)
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// firstDiff shows the first line where got leaves want.
func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			var b bytes.Buffer
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  want: " + w + "\n  got:  " + g)
			return b.String()
		}
	}
	return "(same lines)"
}
