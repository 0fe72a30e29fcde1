// Golden-file access for the LFQ tests (see lfq_golden.h).
#define _POSIX_C_SOURCE 200809L // strtok_r, opendir
#include "lfq_golden.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lfq_golden_dir(char *buf, size_t n) {
    const char *dir = getenv("EMBER_LFQ_GOLDEN_DIR");
    if (dir && *dir) {
        snprintf(buf, n, "%s", dir);
        return buf;
    }
    const char *data = getenv("EMBER_TEST_DATA");
    snprintf(buf, n, "%s/lfq", data && *data ? data : "tests/data");
    return buf;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int lfq_golden_list(const char *dir, char ***paths) {
    *paths = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    char **list = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            list = realloc(list, (size_t)cap * sizeof *list);
        }
        size_t sz = strlen(dir) + len + 2;
        list[n] = malloc(sz);
        snprintf(list[n], sz, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 0) qsort(list, (size_t)n, sizeof *list, cmp_str);
    *paths = list;
    return n;
}

void lfq_golden_free_list(char **paths, int n) {
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

cJSON *lfq_golden_load(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "lfq_golden_load: cannot open %s\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    size_t got = fread(text, 1, (size_t)len, f);
    fclose(f);
    text[got] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) fprintf(stderr, "lfq_golden_load: %s is not valid JSON\n", path);
    return root;
}

const cJSON *lfq_golden_at(const cJSON *root, const char *path) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *node = root;
    for (char *save = NULL, *tok = strtok_r(buf, "/", &save); tok && node; tok = strtok_r(NULL, "/", &save)) {
        if (cJSON_IsArray(node))
            node = cJSON_GetArrayItem(node, atoi(tok));
        else
            node = cJSON_GetObjectItemCaseSensitive(node, tok);
    }
    return node;
}

bool lfq_golden_has(const cJSON *root, const char *path) {
    const cJSON *n = lfq_golden_at(root, path);
    return n && !cJSON_IsNull(n);
}

double lfq_golden_number(const cJSON *root, const char *path, double dflt) {
    const cJSON *n = lfq_golden_at(root, path);
    if (!n || cJSON_IsNull(n)) return dflt;
    if (cJSON_IsBool(n)) return cJSON_IsTrue(n) ? 1.0 : 0.0;
    if (cJSON_IsNumber(n)) return n->valuedouble;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(n, "data");
    if (cJSON_IsArray(data) && cJSON_GetArraySize(data) == 1) {
        const cJSON *v = cJSON_GetArrayItem(data, 0);
        if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? 1.0 : 0.0;
        return v->valuedouble;
    }
    return dflt;
}

const char *lfq_golden_string(const cJSON *root, const char *path) {
    const cJSON *n = lfq_golden_at(root, path);
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

bool lfq_golden_tensor(const cJSON *root, const char *path, lfq_tensor *t) {
    memset(t, 0, sizeof *t);
    const cJSON *n = lfq_golden_at(root, path);
    const cJSON *shape = n ? cJSON_GetObjectItemCaseSensitive(n, "shape") : NULL;
    const cJSON *data = n ? cJSON_GetObjectItemCaseSensitive(n, "data") : NULL;
    if (!cJSON_IsArray(shape) || !cJSON_IsArray(data) || cJSON_GetArraySize(shape) > 8) return false;
    t->ndim = cJSON_GetArraySize(shape);
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        t->shape[i] = (int64_t)cJSON_GetArrayItem(shape, i)->valuedouble;
        t->numel *= t->shape[i];
    }
    if (cJSON_GetArraySize(data) != t->numel) return false;
    t->data = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(double));
    int64_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, data) {
        t->data[i++] = cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? 1.0 : 0.0) : v->valuedouble;
    }
    return true;
}

void lfq_tensor_free(lfq_tensor *t) {
    free(t->data);
    memset(t, 0, sizeof *t);
}

double lfq_rel_to_max(const double *a, const double *b, int64_t n) {
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= err)) err = d; // NaN propagates
        if (fabs(b[i]) > ref) ref = fabs(b[i]);
    }
    return ref > 0 ? err / ref : err;
}

double lfq_rel_scalar(double a, double b, double floor) {
    double ref = fabs(b) > floor ? fabs(b) : floor;
    return ref > 0 ? fabs(a - b) / ref : fabs(a - b);
}

bool lfq_golden_config(const cJSON *root, ember_dtype dt, ember_lfq_config *cfg) {
    ember_lfq_config c = EMBER_LFQ_CONFIG_DEFAULT;
    const char *act = lfq_golden_string(root, "config/straight_through_activation");
    if (act && strcmp(act, "identity") != 0) {
        fprintf(stderr, "golden: straight_through_activation '%s' is not offered\n", act);
        return false;
    }
    if (lfq_golden_number(root, "config/entropy_eps", 1e-5) != 1e-5 ||
        lfq_golden_number(root, "config/l2norm_eps", 1e-12) != 1e-12 ||
        lfq_golden_number(root, "config/frac_per_sample_entropy", 1.0) != 1.0) {
        fprintf(stderr, "golden: eps or frac_per_sample_entropy differ from what this test maps\n");
        return false;
    }
    c.dim = (int32_t)lfq_golden_number(root, "config/dim", 0);
    c.codebook_size = (int32_t)lfq_golden_number(root, "config/codebook_size", 0);
    c.num_codebooks = (int32_t)lfq_golden_number(root, "config/num_codebooks", 1);
    c.codebook_scale = lfq_golden_number(root, "config/codebook_scale", 1.0);
    c.entropy_loss_weight = lfq_golden_number(root, "config/entropy_loss_weight", 0.1);
    c.commitment_loss_weight = lfq_golden_number(root, "config/commitment_loss_weight", 0.0);
    c.diversity_gamma = lfq_golden_number(root, "config/diversity_gamma", 1.0);
    c.inv_temperature = lfq_golden_number(root, "config/inv_temperature", 100.0);
    if (lfq_golden_has(root, "config/has_projections"))
        c.projection = lfq_golden_number(root, "config/has_projections", 0) != 0 ? EMBER_LFQ_PROJ_LINEAR
                                                                                : EMBER_LFQ_PROJ_NONE;
    c.projection_has_bias = lfq_golden_number(root, "config/projection_has_bias", 1) != 0;
    c.soft_clamp_input_value = lfq_golden_number(root, "config/soft_clamp_input_value", 0.0);
    c.spherical = lfq_golden_number(root, "config/spherical", 0) != 0;
    c.softplus_entropy_loss = lfq_golden_number(root, "config/experimental_softplus_entropy_loss", 0) != 0;
    c.entropy_loss_offset = lfq_golden_number(root, "config/entropy_loss_offset", 5.0);
    c.dtype = dt;
    *cfg = c;
    return true;
}

void *lfq_buf_from_f64(const double *src, int64_t n, ember_dtype dt) {
    size_t esz = dt == EMBER_DTYPE_F64 ? sizeof(double) : sizeof(float);
    void *buf = malloc((size_t)(n > 0 ? n : 1) * esz);
    for (int64_t i = 0; i < n; i++) {
        if (dt == EMBER_DTYPE_F64)
            ((double *)buf)[i] = src[i];
        else
            ((float *)buf)[i] = (float)src[i];
    }
    return buf;
}

void lfq_buf_to_f64(const void *src, int64_t n, ember_dtype dt, double *dst) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt == EMBER_DTYPE_F64 ? ((const double *)src)[i] : (double)((const float *)src)[i];
}

bool lfq_golden_set_params(const cJSON *root, ember_lfq *q) {
    ember_dtype dt = ember_lfq_get_config(q)->dtype;
    for (int id = 0; id < EMBER_LFQ_NUM_PARAMS; id++) {
        int64_t n = 0;
        void *p = ember_lfq_param(q, (ember_lfq_param_id)id, &n);
        if (!p) continue;
        char path[128];
        snprintf(path, sizeof path, "params/%s", ember_lfq_param_name((ember_lfq_param_id)id));
        lfq_tensor t;
        if (!lfq_golden_tensor(root, path, &t) || t.numel != n) {
            fprintf(stderr, "golden: %s missing or of the wrong size\n", path);
            lfq_tensor_free(&t);
            return false;
        }
        void *buf = lfq_buf_from_f64(t.data, n, dt);
        memcpy(p, buf, (size_t)n * (dt == EMBER_DTYPE_F64 ? sizeof(double) : sizeof(float)));
        free(buf);
        lfq_tensor_free(&t);
    }
    return true;
}
