package jobs

// gangMiss says how close a gang came to fitting: at level, the best domain
// (name) had room for best of the pods.
type gangMiss struct {
	level Level
	best  int
	name  string
}

// levels lists the domain levels to try for a gang, narrowest first.
func levels(lv Level, required bool) []Level {
	if lv == LevelNone {
		return []Level{LevelNone}
	}
	if required {
		return []Level{lv}
	}
	out := []Level{}
	for l := lv; l <= LevelZone; l++ {
		out = append(out, l)
	}
	return append(out, LevelNone)
}

// placeGang binds n pods of d inside one domain, all or nothing: on success
// the pods are bound and returned; on failure the state is unchanged and the
// miss of the narrowest level tried is returned. blocked nodes are skipped.
func (c *cluster) placeGang(d *demand, n int, lv Level, required bool, blocked []bool) ([]PodPlacement, gangMiss) {
	if n <= 1 {
		return c.placeOne(d, c.groups[LevelNone][0], blocked)
	}
	var first gangMiss
	for li, l := range levels(lv, required) {
		miss := gangMiss{level: l, best: -1}
		bestG, bestFree := -1, int64(0)
		for gi, nodes := range c.groups[l] {
			cnt, free := 0, int64(0)
			for _, i := range nodes {
				if blocked != nil && blocked[i] {
					continue
				}
				cnt += c.podsFit(i, d, n)
				free += c.free[i].milliFree
			}
			if cnt > miss.best {
				miss.best, miss.name = min(cnt, n), c.names[l][gi]
			}
			if cnt >= n && (bestG < 0 || free < bestFree) {
				bestG, bestFree = gi, free
			}
		}
		if li == 0 {
			first = miss
		}
		if bestG < 0 {
			continue
		}
		if ps, ok := c.fillGroup(d, n, c.groups[l][bestG], blocked); ok {
			return ps, gangMiss{}
		}
	}
	return nil, first
}

// placeOne binds a single pod on the best node of nodes.
func (c *cluster) placeOne(d *demand, nodes []int, blocked []bool) ([]PodPlacement, gangMiss) {
	if p, ok := c.bestChoice(d, nodes, blocked); ok {
		c.bind(&p, d)
		return []PodPlacement{p}, gangMiss{}
	}
	return nil, gangMiss{level: LevelNone, best: 0, name: "cluster"}
}

// bestChoice picks the best-scoring node of nodes for one pod of d.
func (c *cluster) bestChoice(d *demand, nodes []int, blocked []bool) (PodPlacement, bool) {
	if c.obj != nil && (d.kind == kindWhole || d.kind == kindFrac) {
		return c.bestObjective(d, nodes, blocked)
	}
	var best PodPlacement
	bestScore, found := int64(0), false
	for _, i := range nodes {
		if blocked != nil && blocked[i] {
			continue
		}
		if c.podsFit(i, d, 1) == 0 {
			continue
		}
		sc := c.score(i, d)
		if found && sc >= bestScore {
			continue
		}
		if p, ok := c.choose(i, d); ok {
			best, bestScore, found = p, sc, true
		}
	}
	return best, found
}

// bestObjective is bestChoice with the objective's score.
func (c *cluster) bestObjective(d *demand, nodes []int, blocked []bool) (PodPlacement, bool) {
	var best PodPlacement
	bestScore, found := 0.0, false
	for _, i := range nodes {
		if (blocked != nil && blocked[i]) || c.podsFit(i, d, 1) == 0 {
			continue
		}
		sc := c.obj.score(c, i, d)
		if found && sc >= bestScore {
			continue
		}
		if p, ok := c.choose(i, d); ok {
			best, bestScore, found = p, sc, true
		}
	}
	return best, found
}

// fillGroup binds n pods of d on nodes one by one, best fit first; it undoes
// everything if one does not fit.
func (c *cluster) fillGroup(d *demand, n int, nodes []int, blocked []bool) ([]PodPlacement, bool) {
	out := make([]PodPlacement, 0, n)
	for range n {
		p, ok := c.bestChoice(d, nodes, blocked)
		if !ok {
			c.unbindAll(out, d)
			return nil, false
		}
		c.bind(&p, d)
		out = append(out, p)
	}
	return out, true
}

func (c *cluster) unbindAll(ps []PodPlacement, d *demand) {
	for i := range ps {
		c.unbind(&ps[i], d)
	}
}

// fitsGang reports whether n pods of d fit in one domain, without binding.
func (c *cluster) fitsGang(d *demand, n int, lv Level, required bool, blocked []bool) bool {
	ps, _ := c.placeGang(d, n, lv, required, blocked)
	if ps == nil {
		return false
	}
	c.unbindAll(ps, d)
	return true
}
