package metal

import (
	"context"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// pagedList is an SDK list answer with pagination meta.
type pagedList interface {
	GetMetaOk() (*metalv1.Meta, bool)
}

// listAll collects every page of a paginated list. fetch asks for one page;
// items extracts its elements. Every page is a call of its own (deadline,
// retries, metrics). Unlike the SDK's ExecuteWithPagination it keeps the HTTP
// status of a failed page, which the typed errors need, and it stops on an
// empty page so that a server misreporting last_page cannot loop it forever.
func listAll[T any, L pagedList](
	ctx context.Context, c *Client, op operation,
	fetch func(ctx context.Context, page, perPage int32) (L, *http.Response, error),
	items func(L) []T,
) ([]T, error) {
	var all []T
	for page := int32(1); ; page++ {
		list, err := call(ctx, c, op, func(ctx context.Context) (L, *http.Response, error) {
			return fetch(ctx, page, c.pageSize)
		})
		if err != nil {
			return nil, err
		}
		got := items(list)
		all = append(all, got...)
		meta, _ := list.GetMetaOk()
		if len(got) == 0 || meta.GetLastPage() <= page {
			return all, nil
		}
	}
}
