// Package trace reads Alibaba's openb GPU cluster traces (the CSV node and
// pod lists published with the FGD paper) from paths the caller gives. A
// malformed row is an error that names the file and line; nothing is
// skipped silently. Trace data is never embedded in the repository.
package trace
