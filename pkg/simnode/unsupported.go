package simnode

import (
	"reflect"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// fillUnsupported sets every nil ...Func field of a go-nvml moq struct (the
// mock.Device, mock.Interface, ...) to a function that returns zero values and
// ERROR_NOT_SUPPORTED, as the driver does for a feature a GPU lacks. The moq
// default is a panic, which no real driver does.
func fillUnsupported(mockStruct any) {
	v := reflect.ValueOf(mockStruct).Elem()
	retType := reflect.TypeFor[nvml.Return]()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Func || !f.IsNil() || !f.CanSet() {
			continue
		}
		ft := f.Type()
		f.Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, ft.NumOut())
			for j := range out {
				out[j] = reflect.Zero(ft.Out(j))
				if ft.Out(j) == retType {
					out[j] = reflect.ValueOf(nvml.ERROR_NOT_SUPPORTED)
				}
			}
			return out
		}))
	}
}
