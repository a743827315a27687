/*
 * libFuzzer target: the safetensors header parser and reader
 * (strata_safetensors_open_image) and the JSON reader under it.  Each input is taken
 * as a whole .safetensors file image: 8-byte length, JSON header, data.  If
 * it opens, every float tensor is read back (bounded), so the offsets the
 * parser accepted are exercised; the bytes after the length prefix are also
 * parsed as bare JSON.  Build and run with scripts/fuzz.sh safetensors [SECONDS].
 *
 * fuzz-sources: core/safetensors.c core/json.c core/error.c core/util.c kernels/quant_core.c
 * fuzz-plain-sources: kernels/quant_tiers.c kernels/quant_scalar.c
 * fuzz-libs: -lm -lpthread
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "strata/json.h"
#include "strata/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct strata_error err = { 0 };
	struct strata_safetensors *st = NULL;
	if (!strata_safetensors_open_image(data, size, "fuzz", &st, &err)) {
		float buf[4096];
		for (uint32_t i = 0; i < strata_safetensors_tensor_count(st); i++) {
			const struct strata_safetensors_tensor *t = strata_safetensors_tensor_at(st, i);
			uint64_t n = t->numel < 4096 ? t->numel : 4096;
			if (strata_safetensors_dtype_is_float(t->dtype))
				strata_safetensors_read_f32(st, t, t->numel - n, n, buf, &err);
			strata_safetensors_find(st, t->name);
		}
		strata_safetensors_metadata(st, "format");
		strata_safetensors_close(st);
	}
	struct strata_json_doc *doc = NULL;
	if (size > 8 && !strata_json_parse((const char *)data + 8, size - 8, "fuzz", &doc, &err))
		strata_json_free(doc);
	return 0;
}
