package mpread_test

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/internal/mpread"
)

var errBad = errors.New("example: malformed")

// Reading the map {"id": 7, "name": "ab"} field by field, and a refusal
// that wraps the caller's sentinel.
func Example() {
	r := mpread.New([]byte("\x82\xa2id\x07\xa4name\xa2ab"), errBad)
	n, _ := r.MapLen()
	for range n {
		k, _ := r.Str()
		switch string(k) {
		case "id":
			v, _ := r.Uint()
			fmt.Println("id", v)
		default:
			v, _ := r.StrUTF8()
			fmt.Printf("%s %s\n", k, v)
		}
	}
	bad := mpread.New([]byte("\xa5ab"), errBad)
	_, err := bad.Str()
	fmt.Println(err, errors.Is(err, errBad))
	// Output:
	// id 7
	// name ab
	// example: malformed: a length of 5 with 2 bytes left true
}
