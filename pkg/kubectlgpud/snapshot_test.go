package kubectlgpud

import (
	"context"
	"errors"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestListPagesAndBound checks that a list follows the server's continue
// tokens to the end and refuses more than MaxObjects items.
func TestListPagesAndBound(t *testing.T) {
	pages := func(total int) func(metav1.ListOptions) ([]int, string, error) {
		return func(o metav1.ListOptions) ([]int, string, error) {
			start := 0
			if o.Continue != "" {
				start, _ = strconv.Atoi(o.Continue)
			}
			if o.Limit != pageSize {
				t.Fatalf("limit %d, want %d", o.Limit, pageSize)
			}
			end := min(start+int(o.Limit), total)
			items := make([]int, 0, end-start)
			for i := start; i < end; i++ {
				items = append(items, i)
			}
			next := ""
			if end < total {
				next = strconv.Itoa(end)
			}
			return items, next, nil
		}
	}
	got, err := list(context.Background(), "pods", pages(1234))
	if err != nil || len(got) != 1234 || *got[1233] != 1233 {
		t.Fatalf("list of 1234 = %d items, %v", len(got), err)
	}
	if _, err := list(context.Background(), "pods", pages(MaxObjects+1)); !errors.Is(err, ErrTooMany) {
		t.Fatalf("list of MaxObjects+1 = %v, want ErrTooMany", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := list(ctx, "pods", pages(10)); !errors.Is(err, context.Canceled) {
		t.Fatalf("list with a cancelled context = %v", err)
	}
}
