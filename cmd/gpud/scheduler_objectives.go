package main

import (
	"flag"
	"strings"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/allocator/objective"
	"github.com/gpud/gpud/pkg/scheduler/decide"
)

// defaultSchedulerObjectives is --objectives' default: today's policy.
const defaultSchedulerObjectives = "util=1,fair=1"

// schedulerObjectiveOptions are --objectives and --gpu-models.
type schedulerObjectiveOptions struct {
	weights    string
	modelsPath string
	// objective and models are the flags parsed by validate.
	objective *jobs.Objective
	models    map[string]jobs.ModelPower
}

func (o *schedulerObjectiveOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.weights, "objectives", defaultSchedulerObjectives, "the weights of the scheduler's terms for the pods of queues without their own (a Queue's spec.objectives): comma-separated term=weight over "+
		strings.Join(objective.Terms, ", ")+" as gpud sim jobs --objectives takes one setting; the default (or \"default\") is today's policy; energy and cost choose GPU pods' nodes, wait orders a queue's pods shortest predicted runtime first")
	fs.StringVar(&o.modelsPath, "gpu-models", "", "CSV of GPU models' busy_w, idle_w, off_w and price_per_gpu_hour (the format of gpud sim jobs --gpu-models) over the built-in table, for the energy and cost weights; a GPU's productName takes the longest model name it contains as a word")
}

// validate parses the flags into o.objective and o.models.
func (o *schedulerObjectiveOptions) validate() []error {
	var errs []error
	ob, err := objective.ParseSetting(o.weights)
	if err != nil {
		errs = append(errs, flagErr("objectives", "%w", err))
	}
	o.objective = ob
	o.models = objective.DefaultModels()
	if o.modelsPath != "" {
		data, err := readSmallFile(o.modelsPath, objective.MaxInput)
		if err == nil {
			o.models, err = objective.ParseModels(data, o.modelsPath, o.models)
		}
		if err != nil {
			errs = append(errs, flagErr("gpu-models", "%w", err))
		}
	}
	return errs
}

// withObjectives sets the parsed --objectives and --gpu-models on cfg.
func withObjectives(o *schedulerObjectiveOptions, cfg decide.Config) decide.Config {
	cfg.Objective, cfg.Models = o.objective, o.models
	return cfg
}
