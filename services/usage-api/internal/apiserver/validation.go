package apiserver

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
)

// maxPoints bounds the intervals of one report.
const maxPoints = 10000

// limits are what a report may ask of the metrics store.
type limits struct {
	resolution time.Duration // the grid figures are exact to
	retention  time.Duration // how far back samples are kept
}

// validate checks a report's question at now: every error names its field.
func (l limits) validate(spec *usagev1.UsageReportSpec, now time.Time) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec")
	start, end := spec.StartTimestamp.Time, spec.EndTimestamp.Time
	if start.IsZero() {
		errs = append(errs, field.Required(path.Child("startTimestamp"), "the start of the period"))
	}
	if end.IsZero() {
		errs = append(errs, field.Required(path.Child("endTimestamp"), "the end of the period"))
	}
	if len(errs) > 0 {
		return errs
	}
	switch {
	case !end.After(start):
		errs = append(errs, field.Invalid(path.Child("endTimestamp"), spec.EndTimestamp, "must be after spec.startTimestamp"))
	case end.After(now):
		errs = append(errs, field.Invalid(path.Child("endTimestamp"), spec.EndTimestamp, "must not be in the future"))
	}
	if oldest := now.Add(-l.retention); start.Before(oldest) {
		errs = append(errs, field.Invalid(path.Child("startTimestamp"), spec.StartTimestamp,
			fmt.Sprintf("is older than the metrics store keeps samples (%s, so not before %s)", l.retention, oldest.UTC().Format(time.RFC3339))))
	}
	if spec.Workload != nil {
		w := spec.Workload
		switch {
		case w.Name == "":
			errs = append(errs, field.Required(path.Child("workload", "name"), "an app's name, or \""+usagev1.Unattributed+"\" without a kind"))
		case w.Kind == "" && w.Name != usagev1.Unattributed:
			errs = append(errs, field.Invalid(path.Child("workload", "kind"), w.Kind, "an app's kind is required unless the name is \""+usagev1.Unattributed+"\""))
		}
	}
	if spec.Step == nil || len(errs) > 0 {
		return errs
	}
	step, period := spec.Step.Duration, end.Sub(start)
	stepPath := path.Child("step")
	switch {
	case step <= 0:
		errs = append(errs, field.Invalid(stepPath, spec.Step.Duration.String(), "must be positive"))
	case step%l.resolution != 0:
		errs = append(errs, field.Invalid(stepPath, step.String(), fmt.Sprintf("must be a multiple of the resolution, %s", l.resolution)))
	case period%step != 0:
		errs = append(errs, field.Invalid(stepPath, step.String(), fmt.Sprintf("must divide the period (%s) into whole intervals", period)))
	case period/step > maxPoints:
		errs = append(errs, field.Invalid(stepPath, step.String(), fmt.Sprintf("would give %d intervals; at most %d", period/step, maxPoints)))
	}
	return errs
}
