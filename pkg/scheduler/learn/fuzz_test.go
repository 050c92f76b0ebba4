package learn

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// FuzzDecode: whatever the ConfigMap holds, loading it never panics, and
// what loads is written back readable.
func FuzzDecode(f *testing.F) {
	f.Add(`{"version":1,"maxKeys":10,"halfLife":100,"minWeight":5,"keys":[{"key":"ns=a|q=","buckets":[[3,1.5],[9,2]]}]}`)
	f.Add(`{"version":1,"maxKeys":1,"halfLife":1,"minWeight":1,"keys":[]}`)
	f.Add(`{not json`)
	l, err := New(Config{Client: newClient(), Namespace: testNS, SchedulerName: "s", MaxKeys: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data string) {
		p, err := l.decode(&corev1.ConfigMap{Data: map[string]string{DataKey: data}})
		if err != nil {
			return
		}
		if p.Len() > 4 || p.Options().MaxKeys != 4 {
			t.Fatalf("loaded %d keys under %+v, want this learner's options", p.Len(), p.Options())
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatalf("loaded data not written back: %v", err)
		}
		if _, err := l.decode(&corev1.ConfigMap{Data: map[string]string{DataKey: string(out)}}); err != nil {
			t.Fatalf("written data not read back: %v\n%s", err, out)
		}
	})
}
