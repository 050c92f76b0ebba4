package predict

import "errors"

// ErrInvalid is matched by every error for a bad argument or a malformed
// encoding.
var ErrInvalid = errors.New("predict: invalid")
