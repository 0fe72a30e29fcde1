// Tiered tables (docs/tiered.md): not built yet.
#include "tbe/rowmap.h"

ember_status ember__tiered_create(ember_ebc *ebc, ember__table *tb, const char *ssd_dir, ember__rowmap **out) {
    (void)ssd_dir;
    *out = NULL;
    return ember__error(ebc->ctx, EMBER_ERR_UNSUPPORTED, "ember_ebc_create: table '%s': tiered tables", tb->name);
}
