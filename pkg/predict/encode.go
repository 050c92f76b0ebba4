package predict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// EncodingVersion is the version [Predictor.Marshal] writes and [Unmarshal]
// accepts.
const EncodingVersion = 1

// MaxEncodedBytes bounds an encoding: a ConfigMap holds at most 1 MiB.
const MaxEncodedBytes = 1 << 20

// encoded is the JSON form: options, then keys from least to most recently
// used, each with its non-empty buckets as [index, weight] pairs.
type encoded struct {
	Version   int          `json:"version"`
	MaxKeys   int          `json:"maxKeys"`
	HalfLife  float64      `json:"halfLife"`
	MinWeight float64      `json:"minWeight"`
	Keys      []encodedKey `json:"keys"`
}

type encodedKey struct {
	Key     string       `json:"key"`
	Buckets [][2]float64 `json:"buckets"`
}

// Marshal encodes the predictor as JSON (weights to 4 significant digits).
// It fails if the encoding is over MaxEncodedBytes: lower MaxKeys.
func (p *Predictor) Marshal() ([]byte, error) {
	out := encoded{Version: EncodingVersion, MaxKeys: p.o.MaxKeys, HalfLife: p.o.HalfLife, MinWeight: p.o.MinWeight,
		Keys: make([]encodedKey, 0, p.lru.Len())}
	for el := p.lru.Back(); el != nil; el = el.Prev() {
		e := el.Value.(*entry)
		k := encodedKey{Key: e.key, Buckets: [][2]float64{}}
		for b, w := range e.w {
			if w > 0 {
				r, _ := strconv.ParseFloat(strconv.FormatFloat(w, 'g', 4, 64), 64)
				k.Buckets = append(k.Buckets, [2]float64{float64(b), r})
			}
		}
		out.Keys = append(out.Keys, k)
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("predict: marshal: %w", err)
	}
	if len(data) > MaxEncodedBytes {
		return nil, fmt.Errorf("predict: marshal: %d keys take %d bytes, over %d: lower the key limit", p.lru.Len(), len(data), MaxEncodedBytes)
	}
	return data, nil
}

// Unmarshal decodes what [Predictor.Marshal] wrote. Everything is checked:
// size, version, unknown fields, trailing data, options within bounds, no
// more keys than MaxKeys, keys valid and unique, bucket indices in range,
// sorted and unique, weights finite and positive.
func Unmarshal(data []byte) (*Predictor, error) {
	p, err := unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("predict: unmarshal: %w", err)
	}
	return p, nil
}

func unmarshal(data []byte) (*Predictor, error) {
	if len(data) > MaxEncodedBytes {
		return nil, fmt.Errorf("%w: %d bytes, over %d", ErrInvalid, len(data), MaxEncodedBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in encoded
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	if in.Version != EncodingVersion {
		return nil, fmt.Errorf("%w: version %d: want %d", ErrInvalid, in.Version, EncodingVersion)
	}
	if in.MaxKeys == 0 || in.HalfLife == 0 || in.MinWeight == 0 {
		return nil, fmt.Errorf("%w: maxKeys, halfLife and minWeight must be set", ErrInvalid)
	}
	p, err := New(Options{MaxKeys: in.MaxKeys, HalfLife: in.HalfLife, MinWeight: in.MinWeight})
	if err != nil {
		return nil, err
	}
	if len(in.Keys) > p.o.MaxKeys {
		return nil, fmt.Errorf("%w: %d keys, over maxKeys %d", ErrInvalid, len(in.Keys), p.o.MaxKeys)
	}
	// A key's weight never exceeds the geometric series' limit.
	maxWeight := 1/(1-p.decay) + 1
	for i, k := range in.Keys {
		if err := checkKeys([]string{k.Key}); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if _, dup := p.keys[k.Key]; dup {
			return nil, fmt.Errorf("%w: key %q listed twice", ErrInvalid, k.Key)
		}
		e := &entry{key: k.Key, w: make([]float64, buckets)}
		last := -1
		for _, bw := range k.Buckets {
			b, w := bw[0], bw[1]
			if b != math.Trunc(b) || b <= float64(last) || b >= float64(buckets) {
				return nil, fmt.Errorf("%w: key %q: bucket %v: want increasing integers in 0..%d", ErrInvalid, k.Key, b, buckets-1)
			}
			if !(w > 0 && w <= maxWeight) {
				return nil, fmt.Errorf("%w: key %q: bucket %v weight %v: want a number in (0, %.4g]", ErrInvalid, k.Key, b, w, maxWeight)
			}
			last = int(b)
			e.w[last] = w
			e.weight += w
		}
		if last < 0 {
			return nil, fmt.Errorf("%w: key %q has no buckets", ErrInvalid, k.Key)
		}
		if e.weight > maxWeight {
			return nil, fmt.Errorf("%w: key %q: total weight %v over %.4g", ErrInvalid, k.Key, e.weight, maxWeight)
		}
		p.keys[k.Key] = p.lru.PushFront(e)
	}
	return p, nil
}
