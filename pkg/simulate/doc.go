// Package simulate replays cluster traces through the [allocator] core: the
// FGD paper's static protocol (resample pods to a target GPU demand, shuffle,
// place one at a time, nothing departs) and a dynamic replay that honours
// creation and deletion times. It writes the published table's CSV and an
// SVG plot. Runs of different seeds and policies proceed in parallel.
package simulate
