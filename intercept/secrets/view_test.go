package secrets

import "testing"

// A released view holds nothing, and releasing it again, or a view of no
// pool, does nothing.
func TestViewRelease(t *testing.T) {
	v, ok := unescapeView(&view{text: `a\nb`}, true)
	if !ok || v.text != "a\nb" || v.bufs == nil {
		t.Fatalf("unescapeView: %q %v", v.text, ok)
	}
	v.release()
	if v.text != "" || v.esc != nil || v.nls != nil || v.bufs != nil {
		t.Errorf("released view still holds %q %v %v", v.text, v.esc, v.nls)
	}
	v.release()
	(&view{text: "raw"}).release()
	var nilView *view
	nilView.release()
	var nilDec *Decoded
	nilDec.Release()
}
